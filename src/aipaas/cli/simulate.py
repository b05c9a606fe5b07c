"""`aipaas simulate openb`: replay the Alibaba openb trace under a placement policy;
`aipaas simulate cycle|run`: the batch scheduler on a Scenario file (sim/scenario*.py)."""

from __future__ import annotations

import contextlib
import gc
import json
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from aipaas.errors import InvalidObject, PayloadTooLarge
from aipaas.scheduler.framework.profile import BEST_POLICY, POLICY_ALIASES
from aipaas.sim.experiment import OpenbRun, mean_at, run_many, run_openb, workload_name
from aipaas.sim.openb import TraceError
from aipaas.sim.paper import load_paper_means
from aipaas.sim.replay import ReplayResult
from aipaas.sim.scenario_build import Scenario, load_scenario
from aipaas.sim.scenario_output import run_cycle
from aipaas.sim.scenario_run import run_scenario
from aipaas.sim.scenario_table import cycle_tables, run_tables

#: The paper's six policies, then ours.
ALL_POLICIES = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", BEST_POLICY)
REPORT_COLUMNS = (90, 95, 100, 110, 120, 130)

console = Console(stderr=True)
simulate_app = typer.Typer(help="Trace-driven simulation on a virtual clock.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(simulate_app, name="simulate")


def _seeds(text: str) -> list[int]:
    """'42-51' or '42,43,47' -> seeds."""
    try:
        if "-" in text:
            low, high = (int(part) for part in text.split("-", 1))
            if high < low:
                raise ValueError
            return list(range(low, high + 1))
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"--seeds: expected '42-51' or '42,43', got {text!r}") from None


def _fail(message: str) -> NoReturn:
    # One line, as every command's error: rich would wrap it at the terminal's width and read
    # brackets in the message as markup.
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    raise typer.Exit(2)


@simulate_app.command("openb")
def openb(
    nodes: Annotated[Path, typer.Option("--nodes", help="Node list CSV (sn, cpu_milli, ...)")],
    pods: Annotated[Path, typer.Option("--pods", help="Pod list CSV (name, cpu_milli, ...)")],
    policy: Annotated[
        str,
        typer.Option(
            help="random, dotprod, clustering, packing, bestfit, fgd, "
            f"{BEST_POLICY} (ours), best, all, or a profile YAML file"
        ),
    ] = "best",
    seed: Annotated[int, typer.Option(help="Seed of arrival order and tie-breaks")] = 42,
    tune: Annotated[float, typer.Option(help="Arrivals up to this multiple of GPU capacity")] = 1.3,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the result here")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG plot of the curve(s)")] = None,
    arrival_order: Annotated[
        Path | None, typer.Option(help="CSV (arrival_index, pod_name) to replay instead")
    ] = None,
    node_order: Annotated[
        Path | None, typer.Option(help="CSV (node_name, tiebreak_prefix) to replay instead")
    ] = None,
    seeds: Annotated[str, typer.Option(help="With --policy all: seeds, e.g. 42-51")] = "42-51",
    paper: Annotated[
        Path | None, typer.Option(help="With --policy all: paper_gpu_allocation.csv to compare")
    ] = None,
    table: Annotated[
        Path | None, typer.Option(help="With --policy all: write the Markdown table here")
    ] = None,
    jobs: Annotated[int, typer.Option(help="With --policy all: worker processes")] = 2,
) -> None:
    """Replay the openb trace: every pod arrives once, nothing leaves (the FGD paper's protocol)."""
    for path, option in ((nodes, "--nodes"), (pods, "--pods")):
        if not path.is_file():
            _fail(f"{option}: no such file: {path}")
    if policy == "all":
        _compare_all(nodes, pods, tune, _seeds(seeds), json_out, plot, paper, table, jobs)
        return
    run = OpenbRun(
        str(nodes),
        str(pods),
        POLICY_ALIASES.get(policy, policy),
        seed,
        tune,
        str(arrival_order) if arrival_order else None,
        str(node_order) if node_order else None,
    )
    with Progress(
        TextColumn(f"[bold]{run.policy}[/bold] seed {seed}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} pods"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("replay", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        try:
            result = run_openb(run, advance)
        except (TraceError, ValueError) as error:
            _fail(str(error))
    _print_summary(result)
    if json_out:
        json_out.write_text(json.dumps(result.to_json(), indent=1))
    if plot:
        from aipaas.sim.plot import plot_curves

        plot_curves({result.policy: result.curve}, plot, f"openb {workload_name(str(pods))}")


def _print_summary(result: ReplayResult) -> None:
    at = {int(p["arrived_pct"]): p["gpu_alloc_pct"] for p in result.curve}
    grid = Table(title=f"{result.policy}, seed {result.seed}, tune {result.tune}")
    grid.add_column("measure")
    grid.add_column("value", justify="right")
    grid.add_row(
        "pods arrived / scheduled / failed",
        f"{result.pods_arrived} / {result.pods_scheduled} / {result.pods_failed}",
    )
    for column in REPORT_COLUMNS:
        if column in at:
            grid.add_row(f"GPU allocation % at {column}% arrived", f"{at[column]:.2f}")
    grid.add_row("idle GPU that is fragmented %", f"{result.fragmentation_pct:.2f}")
    grid.add_row("seconds", f"{result.elapsed_s:.2f}")
    Console().print(grid)


def _compare_all(
    nodes: Path,
    pods: Path,
    tune: float,
    seeds: list[int],
    json_out: Path | None,
    plot: Path | None,
    paper: Path | None,
    table_out: Path | None,
    jobs: int,
) -> None:
    runs = [OpenbRun(str(nodes), str(pods), p, s, tune) for p in ALL_POLICIES for s in seeds]
    with Progress(
        TextColumn("runs"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("all", total=len(runs))
        try:
            results = run_many(runs, jobs, lambda _: progress.advance(task))
        except (TraceError, ValueError) as error:
            _fail(str(error))
    workload = workload_name(str(pods))
    published = load_paper_means(paper) if paper else {}
    by_policy = {p: [r for r in results if r.policy == p] for p in ALL_POLICIES}
    lines = [
        f"Workload `{workload}`, tune {tune}, seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}): "
        "mean GPU allocation % at each arrived %; paper's mean in brackets where published.",
        "",
        "| policy | " + " | ".join(f"{c}%" for c in REPORT_COLUMNS) + " | failed pods | s/run |",
        "|---|" + "---|" * (len(REPORT_COLUMNS) + 2),
    ]
    for name, group in by_policy.items():
        cells = []
        for column in REPORT_COLUMNS:
            ours = mean_at(group, column)
            theirs = published.get((workload, name, column))
            text = "-" if ours is None else f"{ours:.2f}"
            cells.append(text + (f" [{theirs:.2f}]" if theirs is not None else ""))
        failed = statistics.fmean(r.pods_failed for r in group)
        elapsed = statistics.fmean(r.elapsed_s for r in group)
        label = f"{name} (ours)" if name == BEST_POLICY else name
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {failed:.0f} | {elapsed:.2f} |")
    markdown = "\n".join(lines) + "\n"
    Console().print(markdown)
    if table_out:
        table_out.write_text(markdown)
    if json_out:
        json_out.write_text(json.dumps([r.to_json() for r in results], indent=1))
    if plot:
        from aipaas.sim.plot import plot_curves

        mean_curves = {}
        for name, group in by_policy.items():
            points = []
            for pct in range(131):
                value = mean_at(group, pct)
                if value is not None:
                    points.append({"arrived_pct": pct, "gpu_alloc_pct": value})
            mean_curves[name] = points
        plot_curves(mean_curves, plot, f"openb {workload}: mean over {len(seeds)} seeds")


# --- scenarios: `simulate cycle` and `simulate run` (issue 11) --------------------------------

ScenarioFile = Annotated[
    Path, typer.Option("--file", "-f", help="A Scenario YAML (or JSON) document")
]
OutputFormat = Annotated[str, typer.Option("--output", "-o", help="json or table")]


def _scenario(path: Path, output: str, *, honour_arrivals: bool) -> Scenario:
    """The built scenario; bad input is an error on stderr naming each field, exit code 2,
    nothing on stdout."""
    if output not in ("json", "table"):
        _fail(f"--output: expected json or table, got {output!r}")
    try:
        return load_scenario(path, honour_arrivals=honour_arrivals)
    except (InvalidObject, PayloadTooLarge) as error:
        fields = getattr(error, "fields", None) or []
        lines = [str(f) for f in fields] or [error.message]
        _fail(f"{path}: " + "\n  ".join(lines))


def _emit(
    result: dict[str, Any], output: str, tables: Callable[[dict[str, Any]], list[Table]]
) -> None:
    if output == "json":
        typer.echo(json.dumps(result, indent=1))
        return
    out = Console()
    for table in tables(result):
        out.print(table)


@contextlib.contextmanager
def _no_cycle_collector() -> Iterator[None]:
    """A large scenario allocates millions of short-lived objects and holds few reference
    cycles: the cycle collector walking the whole heap over and over costs more than a third
    of a 15,000-job run. Reference counting still frees what is dropped."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@simulate_app.command("cycle")
def cycle(file: ScenarioFile, output: OutputFormat = "json") -> None:
    """One scheduling cycle (every action of the profile, once) on the scenario's state."""
    with _no_cycle_collector():
        scenario = _scenario(file, output, honour_arrivals=False)
        result = run_cycle(scenario)
    _emit(result, output, cycle_tables)


@simulate_app.command("run")
def run(
    file: ScenarioFile,
    output: OutputFormat = "json",
    until: Annotated[
        float | None, typer.Option(help="Stop at this virtual time (seconds)", min=0)
    ] = None,
) -> None:
    """Cycles on a virtual clock with arrivals and durations, until every job has finished
    (or until the time given); what happened to each job."""
    with _no_cycle_collector():
        scenario = _scenario(file, output, honour_arrivals=True)
        result = run_scenario(scenario, until)
    _emit(result, output, run_tables)
