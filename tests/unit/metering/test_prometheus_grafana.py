"""The Grafana dashboard (deploy/grafana/aipaas.json) asks only for series the server exports,
its PromQL parses (promtool, from Debian's prometheus), and its variables are defined."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from aipaas.metering.metrics import Metrics

DASHBOARD = Path(__file__).parents[3] / "deploy" / "grafana" / "aipaas.json"


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def expressions() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def exported() -> set[str]:
    families = Metrics().registry.collect()
    return {family.name for family in families} | {
        f"{family.name}_total" for family in families if family.type == "counter"
    }


def test_every_series_the_dashboard_asks_for_is_exported() -> None:
    names = exported()
    asked = {
        re.sub(r"(_bucket|_count|_sum)$", "", name)
        for expr in expressions()
        for name in re.findall(r"\baipaas_[a-z_]+", expr)
    }
    assert asked, "the dashboard asks for nothing"
    assert sorted(asked - names) == []
    per_tenant = {n for n in asked if n.startswith(("aipaas_tenant_", "aipaas_queue_"))}
    for wanted in ("gpus_allocated", "gpus_guaranteed", "gpus_fair_share", "cost_per_hour"):
        assert any(wanted in name for name in per_tenant), wanted


def test_panels_have_distinct_ids_and_the_variables_they_use_exist() -> None:
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    defined = {v["name"] for v in dashboard()["templating"]["list"]}
    used = {m for expr in expressions() for m in re.findall(r"\$(\w+)", expr)}
    assert used <= defined


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus)")
def test_every_expression_parses(tmp_path: Path) -> None:
    rules = [
        {
            "record": f"aipaas:panel_{i}",
            "expr": expr.replace("$tenant", ".*").replace("$queue", ".*"),
        }
        for i, expr in enumerate(expressions())
    ]
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(rules)} rules found" in checked.stdout
