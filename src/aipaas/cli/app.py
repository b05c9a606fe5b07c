"""The `aipaas` command: one typer app; each domain adds its commands through `register`."""

from __future__ import annotations

import typer

from aipaas.cli import allocate, control, pools, simulate

app = typer.Typer(
    name="aipaas",
    help="aipaas: a shared, multi-tenant service for AI work on a pool of GPU machines.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

for module in (simulate, control, allocate, pools):
    module.register(app)


def main() -> None:
    app()
