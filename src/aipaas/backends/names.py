"""The names ``--backend`` takes, checked without importing any backend (settings use it)."""

from __future__ import annotations

NAMES = ("local", "sim", "demo", "slurm", "ray", "kubernetes")
#: the backends that may run side by side (sim and demo have simulated nodes of their own)
SIDE_BY_SIDE = ("local", "slurm", "ray")


def check_names(name: str) -> list[str]:
    """The backends ``name`` names (``local`` or ``local,slurm``); ValueError when unknown."""
    parts = [part.strip() for part in name.split(",")]
    if len(parts) == 1:
        if parts[0] not in NAMES:
            raise ValueError(f"unknown backend {name!r}; known: {', '.join(NAMES)}")
        return parts
    wrong = [p for p in parts if p not in SIDE_BY_SIDE]
    if wrong or len(set(parts)) != len(parts):
        raise ValueError(
            f"backends {name!r}: side by side only {', '.join(SIDE_BY_SIDE)}, each once"
        )
    return parts
