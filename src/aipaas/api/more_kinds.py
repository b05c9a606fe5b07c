"""The kinds of the later domains, one module each; api/registry.py adds them to ``KINDS``.

A domain's module owns its kinds and lists them in its ``*_KINDS`` tuple: adding a kind never
touches this file or the registry.
"""

from __future__ import annotations

from aipaas.api.data import DATA_KINDS
from aipaas.api.finops import FINOPS_KINDS
from aipaas.api.meta import Object
from aipaas.api.pool import POOL_KINDS
from aipaas.api.service import SERVICE_KINDS

MORE_KINDS: tuple[type[Object], ...] = (*DATA_KINDS, *SERVICE_KINDS, *POOL_KINDS, *FINOPS_KINDS)
