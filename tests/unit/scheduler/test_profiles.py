"""Profiles are typed: each plugin's arguments are a pydantic model; a misspelt, out-of-range or
wrongly typed argument, or an unknown plugin, is an error naming the plugin and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from aipaas.cli.app import app
from aipaas.scheduler.framework.cluster import ClusterState, NodeSpec
from aipaas.scheduler.framework.profile import (
    SchedulerProfile,
    builtin_profile_names,
    load_profile,
    profile_problems,
)
from aipaas.scheduler.framework.registry import NoArgs, PluginArgs, PluginContext, Registry
from aipaas.scheduler.framework.runtime import Scheduler
from aipaas.scheduler.plugins import default_registry
from aipaas.scheduler.plugins.fgd import FgdArgs
from aipaas.scheduler.plugins.fgd_stranding import StrandingFgdArgs, StrandingFgdScore
from aipaas.scheduler.plugins.fit import GpuFit

SAMPLE = Path(__file__).parents[2] / "data" / "openb"


def profile(
    scores: list[dict[str, Any]] | None = None,
    picker: dict[str, Any] | None = None,
    filters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "aipaas/v1",
        "kind": "SchedulerProfile",
        "metadata": {"name": "mine"},
        "spec": {
            "filters": filters or [{"name": "NodeResourcesFit"}, {"name": "GpuFit"}],
            "scores": scores or [{"name": "FGDStranding", "args": {"weight": 2}}],
            "gpuPicker": picker or {"name": "BestFitGpus"},
        },
    }


def load_error(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError) as error:
        load_profile(str(path))
    message = str(error.value)
    assert message.startswith(f"{path}: invalid scheduler profile: ")
    return message.removeprefix(f"{path}: invalid scheduler profile: ")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(
            profile(
                scores=[
                    {"name": "BestFit"},
                    {"name": "Random"},
                    {"name": "FGD", "args": {"weigth": 2}},
                ]
            ),
            "spec.scores[2].args.weigth: unknown argument of plugin FGD "
            "(it takes: coverage, resolution, tightGpuTies)",
            id="misspelt",
        ),
        pytest.param(
            profile(scores=[{"name": "FGDStranding", "args": {"weight": -1}}]),
            "spec.scores[0].args.weight: input should be greater than or equal to 0, got -1 "
            "(argument of plugin FGDStranding)",
            id="below the range",
        ),
        pytest.param(
            profile(scores=[{"name": "FGDStranding", "args": {"weight": 1000}}]),
            "spec.scores[0].args.weight: input should be less than or equal to 100, got 1000 "
            "(argument of plugin FGDStranding)",
            id="above the range",
        ),
        pytest.param(
            profile(scores=[{"name": "FGD", "args": {"coverage": 1.5}}]),
            "spec.scores[0].args.coverage: input should be less than or equal to 1, got 1.5 "
            "(argument of plugin FGD)",
            id="coverage above 1",
        ),
        pytest.param(
            profile(scores=[{"name": "FGD", "args": {"resolution": 5000}}]),
            "spec.scores[0].args.resolution: input should be less than or equal to 1000, "
            "got 5000 (argument of plugin FGD)",
            id="resolution above a GPU",
        ),
        pytest.param(
            profile(scores=[{"name": "FGDStranding", "args": {"weight": "heavy"}}]),
            "spec.scores[0].args.weight: input should be a valid number, got 'heavy' "
            "(argument of plugin FGDStranding)",
            id="wrong type",
        ),
        pytest.param(
            profile(scores=[{"name": "FGD", "args": {"tightGpuTies": "yes"}}]),
            "spec.scores[0].args.tightGpuTies: input should be a valid boolean, got 'yes' "
            "(argument of plugin FGD)",
            id="a string is no bool",
        ),
        pytest.param(
            profile(picker={"name": "FGDStranding", "args": {"weight": True}}),
            "spec.gpuPicker.args.weight: input should be a valid number, got True "
            "(argument of plugin FGDStranding)",
            id="a bool is no number, in the picker",
        ),
        pytest.param(
            profile(filters=[{"name": "GpuFit", "args": {"strict": True}}]),
            "spec.filters[0].args.strict: unknown argument of plugin GpuFit "
            "(it takes: no arguments)",
            id="a plugin without arguments",
        ),
        pytest.param(
            profile(scores=[{"name": "BestFit"}, {"name": "FGDX"}]),
            "spec.scores[1].name: unknown plugin 'FGDX' (known plugins: BestFit, BestFitGpus,",
            id="unknown plugin",
        ),
    ],
)
def test_profile_files_are_typed(tmp_path: Path, data: dict[str, Any], expected: str) -> None:
    assert load_error(tmp_path, data).startswith(expected)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    data = profile(
        scores=[{"name": "FGD", "args": {"coverage": 0, "colour": "red"}}],
        picker={"name": "Nope"},
    )
    problems = load_error(tmp_path, data).split("; ")
    assert [p.split(":")[0] for p in problems] == [
        "spec.scores[0].args.coverage",
        "spec.scores[0].args.colour",
        "spec.gpuPicker.name",
    ]


@pytest.mark.parametrize("name", builtin_profile_names())
def test_builtin_profiles_are_well_typed(name: str) -> None:
    assert profile_problems(load_profile(name), default_registry()) == []


def test_typed_arguments_reach_the_plugin() -> None:
    scheduler = Scheduler(
        ClusterState([NodeSpec("n", 1000, 1000, 1, "T4")]),
        SchedulerProfile.model_validate(
            profile(scores=[{"name": "FGDStranding", "args": {"weight": 3, "coverage": 0.5}}])
        ),
    )
    plugin = scheduler.scorers[0][0]
    assert isinstance(plugin, StrandingFgdScore)
    assert plugin.weight == 3.0


def test_a_profile_made_in_code_is_checked_by_the_scheduler() -> None:
    bad = SchedulerProfile.model_validate(
        profile(scores=[{"name": "FGDStranding", "args": {"wieght": 3}}])
    )
    with pytest.raises(ValueError) as error:
        Scheduler(ClusterState([NodeSpec("n", 1, 1)]), bad)
    assert str(error.value) == (
        "profile mine: invalid scheduler profile: spec.scores[0].args.wieght: unknown argument "
        "of plugin FGDStranding (it takes: coverage, weight, reserve)"
    )


class ColourArgs(PluginArgs):
    colour: str = "red"


def test_a_registry_of_its_own_types_its_plugins() -> None:
    registry = Registry()
    registry.register("Colourful", lambda context: GpuFit(), ColourArgs)
    registry.register("Plain", lambda context: GpuFit())
    assert registry.args_model("Plain") is NoArgs
    assert registry.check_args("Colourful", {"colour": "blue"}) == ColourArgs(colour="blue")
    problems = registry.check_args("Colourful", {"color": "blue"})
    assert isinstance(problems, list)
    assert [(p.path, p.reason) for p in problems] == [
        ("color", "unknown argument of plugin Colourful (it takes: colour)")
    ]
    with pytest.raises(ValueError, match="unknown plugin 'Nope'; known plugins: Colourful, Plain"):
        registry.args_model("Nope")
    other = Registry()
    other.merge(registry)
    assert other.args_model("Colourful") is ColourArgs


def test_the_registry_builds_with_typed_arguments() -> None:
    seen: list[object] = []

    def factory(context: PluginContext) -> GpuFit:
        seen.append(context.args)
        return GpuFit()

    registry = Registry()
    registry.register("Colourful", factory, ColourArgs)
    registry.build("Colourful", PluginContext({"colour": "blue"}, np.random.default_rng(0)))
    assert seen == [ColourArgs(colour="blue")]
    with pytest.raises(ValueError, match=r"args\.colour: input should be a valid string, got 7"):
        registry.build("Colourful", PluginContext({"colour": 7}, np.random.default_rng(0)))


def test_argument_models_forbid_extras_and_coercion() -> None:
    for model in (FgdArgs, StrandingFgdArgs):
        assert model.model_config.get("extra") == "forbid"
        assert model.model_config.get("strict") is True
    assert FgdArgs() == FgdArgs(coverage=0.95, resolution=None, tightGpuTies=False)
    assert StrandingFgdArgs().weight == 2.0


def test_simulate_refuses_a_bad_profile_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(profile(scores=[{"name": "FGD", "args": {"weigth": 2}}])))
    result = CliRunner().invoke(
        app,
        [
            "simulate", "openb",
            "--nodes", str(SAMPLE / "openb_node_list_sample.csv"),
            "--pods", str(SAMPLE / "openb_pod_list_sample.csv"),
            "--policy", str(path),
        ],
    )  # fmt: skip
    assert result.exit_code == 2
    said = "".join(result.stderr.split())  # the console wraps long lines
    assert "spec.scores[0].args.weigth:unknownargumentofpluginFGD" in said
