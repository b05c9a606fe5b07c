"""PNG plots of allocation curves, in the style of the FGD paper's Figure 9."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path


def plot_curves(
    curves: Mapping[str, Sequence[dict[str, float]]],
    path: str | Path,
    title: str,
    reference: Mapping[str, Sequence[tuple[int, float]]] | None = None,
) -> None:
    """One line per policy: GPU allocation % against arrived GPU demand %."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5), dpi=120)
    for name, curve in curves.items():
        xs = [p["arrived_pct"] for p in curve]
        ys = [p["gpu_alloc_pct"] for p in curve]
        axes.plot(xs, ys, label=name, linewidth=1.6)
    for name, points in (reference or {}).items():
        axes.plot(
            [x for x, _ in points],
            [y for _, y in points],
            linestyle="--",
            linewidth=1,
            label=f"{name} (paper)",
        )
    axes.plot([0, 100], [0, 100], color="grey", linewidth=0.6, linestyle=":")
    axes.set_xlabel("Arrived GPU demand (% of cluster GPU capacity)")
    axes.set_ylabel("GPU allocation (%)")
    axes.set_title(title)
    axes.set_xlim(0, 130)
    axes.set_ylim(0, 100)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    inset = figure.add_axes((0.18, 0.55, 0.3, 0.3))
    for curve in curves.values():
        tail = [p for p in curve if p["arrived_pct"] >= 85]
        inset.plot([p["arrived_pct"] for p in tail], [p["gpu_alloc_pct"] for p in tail])
    inset.set_title("85-130%", fontsize=7)
    inset.tick_params(labelsize=6)
    inset.grid(alpha=0.3)
    figure.savefig(path, bbox_inches="tight")
    plt.close(figure)
