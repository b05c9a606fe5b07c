"""The later domains' HTTP routes (datasets, services and their entry point, node pools,
FinOps, the dashboard); server/app.py mounts them before the generic routes by plural kind, so
that a domain's own paths win over /api/v1/{plural}.

Each domain adds its router to ``routers``; its module owns its paths.
"""

from __future__ import annotations

from fastapi import APIRouter

from aipaas.server import (
    dashboard_routes,
    data_routes,
    entry,
    finops_routes,
    lending_routes,
    watch_routes,
)


def routers() -> list[APIRouter]:
    """The domains' routers, in the order they are mounted."""
    return [
        dashboard_routes.router,
        finops_routes.router,
        watch_routes.router,
        entry.router,
        data_routes.router,
        lending_routes.router,
    ]
