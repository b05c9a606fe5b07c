"""`aipaas simulate openb` on the openb sample: JSON, plot, aliases, errors, --policy all."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from aipaas.cli.app import app

SAMPLE = Path(__file__).parents[2] / "data" / "openb"
NODES = str(SAMPLE / "openb_node_list_sample.csv")
PODS = str(SAMPLE / "openb_pod_list_sample.csv")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JSON_KEYS = {
    "policy",
    "seed",
    "tune",
    "total_gpus",
    "pods_arrived",
    "pods_scheduled",
    "pods_failed",
    "curve",
    "elapsed_s",
    "allocation_ratio",
    "fragmentation_pct",
    "failed_pods",
}
runner = CliRunner()


def simulate(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["simulate", "openb", *args])
    return result.exit_code, result.stdout, result.stderr


def squeeze(text: str) -> str:
    """Without whitespace: the console wraps long messages, even inside a path."""
    return "".join(text.split())


def test_fgd_with_json_and_plot(tmp_path: Path) -> None:
    out, png = tmp_path / "fgd.json", tmp_path / "fgd.png"
    code, stdout, _ = simulate(
        "--nodes", NODES, "--pods", PODS, "--policy", "fgd", "--json", str(out), "--plot", str(png)
    )  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    assert set(data) == JSON_KEYS
    assert (data["policy"], data["seed"], data["tune"], data["total_gpus"]) == ("fgd", 42, 1.3, 770)
    assert data["pods_arrived"] == 1337
    assert data["pods_scheduled"] + data["pods_failed"] == data["pods_arrived"]
    assert data["curve"][0]["arrived_pct"] == 0 and data["curve"][-1]["arrived_pct"] == 130
    assert png.read_bytes().startswith(PNG_SIGNATURE)
    # The summary table names the run and the pod counts.
    assert "fgd, seed 42, tune 1.3" in stdout
    assert f"{data['pods_arrived']} / {data['pods_scheduled']} / {data['pods_failed']}" in stdout


def test_best_is_fgdx_and_seed_is_used(tmp_path: Path) -> None:
    out = tmp_path / "best.json"
    code, _, _ = simulate(
        "--nodes", NODES, "--pods", PODS, "--policy", "best", "--seed", "7", "--tune", "1.1",
        "--json", str(out),
    )  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    assert (data["policy"], data["seed"], data["tune"]) == ("fgdx", 7, 1.1)
    # Arrivals stop near 110%: the last pod may overshoot by under one node's GPUs (0.9%), and
    # the last column may take samples one above it.
    assert 110 <= data["curve"][-1]["arrived_pct"] <= 112


def test_default_policy_is_best(tmp_path: Path) -> None:
    out = tmp_path / "default.json"
    assert simulate("--nodes", NODES, "--pods", PODS, "--json", str(out))[0] == 0
    assert json.loads(out.read_text())["policy"] == "fgdx"


def test_unknown_policy() -> None:
    code, _, stderr = simulate("--nodes", NODES, "--pods", PODS, "--policy", "magic")
    assert code == 2
    assert squeeze("error: unknown policy 'magic'; choose one of: bestfit, clustering,") in (
        squeeze(stderr)
    )
    for name in ("dotprod", "fgd", "fgdx", "packing", "random", "best"):
        assert f"{name}," in squeeze(stderr)


def test_missing_nodes_file(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "nodes.csv"
    code, _, stderr = simulate("--nodes", str(missing), "--pods", PODS)
    assert code == 2
    assert squeeze(f"error: --nodes: no such file: {missing}") in squeeze(stderr)


def test_missing_pods_file(tmp_path: Path) -> None:
    missing = tmp_path / "pods.csv"
    code, _, stderr = simulate("--nodes", NODES, "--pods", str(missing))
    assert code == 2
    assert squeeze(f"--pods: no such file: {missing}") in squeeze(stderr)


def test_malformed_pods_file(tmp_path: Path) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "p0,1000,100,1,500,\n"
        "p1,1000,100,2,300,\n"
    )
    code, _, stderr = simulate("--nodes", NODES, "--pods", str(pods), "--policy", "bestfit")
    assert code == 2
    assert squeeze(f"{pods} row 3: 2 GPUs must be whole (gpu_milli 1000), got 300") in squeeze(
        stderr
    )


def test_bad_seeds() -> None:
    code, _, stderr = simulate(
        "--nodes", NODES, "--pods", PODS, "--policy", "all", "--seeds", "9-3"
    )
    assert code == 2
    assert "--seeds: expected '42-51' or '42,43', got '9-3'" in " ".join(stderr.split())


def test_replay_from_order_files(tmp_path: Path) -> None:
    arrivals = tmp_path / "arrivals.csv"
    arrivals.write_text(
        "arrival_index,pod_name\n0,openb-pod-0000\n1,openb-pod-0008\n2,openb-pod-0000-tuned-0\n"
    )
    ranks = tmp_path / "ranks.csv"
    lines = SAMPLE.joinpath("openb_node_list_sample.csv").read_text().splitlines()[1:]
    ranks.write_text(
        "node_name,tiebreak_prefix\n"
        + "".join(f"{line.split(',')[0]},{i:04d}\n" for i, line in enumerate(lines))
    )
    out = tmp_path / "r.json"
    code, _, _ = simulate(
        "--nodes", NODES, "--pods", PODS, "--policy", "bestfit", "--arrival-order", str(arrivals),
        "--node-order", str(ranks), "--json", str(out),
    )  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    # Three whole-GPU pods of 12 cores each, on an empty cluster: all placed.
    assert (data["pods_arrived"], data["pods_scheduled"], data["pods_failed"]) == (3, 3, 0)
    assert data["allocation_ratio"]["milli_gpu_pct"] == round(300 / 770, 2)


def test_bad_order_file(tmp_path: Path) -> None:
    ranks = tmp_path / "ranks.csv"
    ranks.write_text("node_name,tiebreak_prefix\nopenb-node-0000,0001\n")
    code, _, stderr = simulate(
        "--nodes", NODES, "--pods", PODS, "--policy", "bestfit", "--node-order", str(ranks)
    )
    assert code == 2
    assert squeeze(f"{ranks}: no tie-break rank for 151 node(s)") in squeeze(stderr)


def test_all_policies_table(tmp_path: Path) -> None:
    table, out, png = tmp_path / "T.md", tmp_path / "all.json", tmp_path / "all.png"
    code, _, _ = simulate(
        "--nodes", NODES, "--pods", PODS, "--policy", "all", "--seeds", "42-43", "--jobs", "1",
        "--table", str(table), "--json", str(out), "--plot", str(png),
    )  # fmt: skip
    assert code == 0
    lines = table.read_text().splitlines()
    assert lines[0].startswith("Workload `sample`, tune 1.3, seeds 42..43 (2):")
    assert lines[2] == "| policy | 90% | 95% | 100% | 110% | 120% | 130% | failed pods | s/run |"
    assert lines[3] == "|---|---|---|---|---|---|---|---|---|"
    rows = lines[4:]
    labels = [row.split("|")[1].strip() for row in rows]
    assert labels == [
        "random", "dotprod", "clustering", "packing", "bestfit", "fgd", "fgdx (ours)"
    ]  # fmt: skip
    results = json.loads(out.read_text())
    assert [(r["policy"], r["seed"]) for r in results] == [
        (p, s)
        for p in ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", "fgdx")
        for s in (42, 43)
    ]
    # Each cell is the mean over the two seeds at that arrived %.
    for row, policy in zip(rows, ("random", "dotprod", "clustering"), strict=False):
        pair = [r for r in results if r["policy"] == policy]
        at_130 = [
            next(p["gpu_alloc_pct"] for p in r["curve"] if p["arrived_pct"] == 130) for r in pair
        ]
        assert row.split("|")[7].strip() == f"{sum(at_130) / 2:.2f}"
        failed = sum(r["pods_failed"] for r in pair) / 2
        assert row.split("|")[8].strip() == f"{failed:.0f}"
    assert png.read_bytes().startswith(PNG_SIGNATURE)
