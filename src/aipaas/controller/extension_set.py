"""Which cycle extensions (controller/extensions.py) a server's controller runs.

Each domain adds its own line to ``build_extensions``; an extension reads what it needs from
the settings and may decide it has nothing to do (returns None).
"""

from __future__ import annotations

from collections.abc import Callable

from aipaas.controller.budgets import budgets_extension
from aipaas.controller.budgets_alerts import alerts_extension
from aipaas.controller.budgets_metrics import metrics_extension
from aipaas.controller.datasets import datasets_extension
from aipaas.controller.extensions import CycleExtension, CycleIntake
from aipaas.controller.kube_import import kube_import_extension
from aipaas.controller.pools import pools_extension
from aipaas.controller.services import build as services_extension
from aipaas.settings import Settings

#: a domain's factory: the server's settings -> its extension, or None (nothing to do)
Factory = Callable[[Settings], CycleExtension | CycleIntake | None]


def factories() -> list[Factory]:
    """The domains' factories, in the order their extensions run each cycle."""
    return [
        pools_extension,
        services_extension,
        budgets_extension,
        metrics_extension,
        alerts_extension,
        datasets_extension,
        kube_import_extension,
    ]


def build_extensions(settings: Settings) -> list[CycleExtension | CycleIntake]:
    built = (factory(settings) for factory in factories())
    return [extension for extension in built if extension is not None]
