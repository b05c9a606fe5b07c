"""Exit codes by kind of failure, one message and no traceback, --version, shell completion,
allocate with several -f, `aipaas up` and `aipaas server` on a taken port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from aipaas import __version__
from aipaas.cli import control_server
from aipaas.cli.app import app
from tests.unit.cli.cli_world import World, job_yaml

AIPAAS = str(Path(sys.executable).parent / "aipaas")
EXAMPLE = Path(__file__).parents[3] / "examples" / "dra" / "whatif-h100.yaml"


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("error: ")
    return lines[0]


class TestExitCodes:
    def test_each_kind_of_failure_has_its_code(self, world: World) -> None:
        world.client().apply(job_yaml("a"))
        world.set_status("Job", "acme", "a", phase="Succeeded")
        cases: list[tuple[list[str], str, int]] = [
            (["get", "job", "nope", "-t", "acme"], "cli-admin-token", 3),  # not found
            (["get", "gizmos"], "cli-admin-token", 2),  # unknown kind: a usage error
            (["get", "jobs", "-t", "rival"], world.alice, 3),  # another tenant's
            (["get", "jobs"], "wrong-token", 4),  # unauthorised
            (["apply", "-f", "-"], world.alice, 4),  # forbidden (a member writes a tenant)
            (["get", "jobs", "-o", "xml"], "cli-admin-token", 2),  # usage
            (["get", "jobs", "--no-such-option"], "cli-admin-token", 2),  # usage (click)
            (["apply", "-f", "-"], "cli-admin-token", 2),  # invalid object
            (["cancel", "a", "-t", "acme"], "cli-admin-token", 1),  # conflict: finished
        ]
        inputs = {
            4: "apiVersion: aipaas/v1\nkind: Tenant\nmetadata: {name: mine}\n",
            2: "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: b, tenant: acme}\nspec: {}\n",
        }
        for args, token, code in cases:
            result = world.cli(*args, token=token, input=inputs.get(code))
            assert result.exit_code == code, (args, result.exit_code, result.stderr)
            if "--no-such-option" not in args:
                one_error_line(result.stderr)

    def test_invalid_object_names_the_field(self, world: World) -> None:
        text = "apiVersion: aipaas/v1\nkind: Job\nmetadata: {name: b, tenant: acme}\nspec: {}\n"
        result = world.cli("apply", "-f", "-", input=text)
        assert result.exit_code == 2
        assert "spec.tasks" in result.stderr

    def test_unreachable_is_5(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]  # bound here, never listening: nothing answers
            env = {"AIPAAS_URL": f"http://127.0.0.1:{port}", "AIPAAS_CONFIG": "/nonexistent"}
            result = CliRunner().invoke(app, ["get", "jobs"], env=env)
        assert result.exit_code == 5
        assert one_error_line(result.stderr).startswith(
            f"error: cannot reach http://127.0.0.1:{port}"
        )

    def test_no_traceback_from_the_real_command(self, tmp_path: Path) -> None:
        """A broken config file is a usage error naming it; a URL httpx cannot read (not an
        aipaas error at all) still ends in one line."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIPAAS_")}
        config = tmp_path / "config.yaml"
        for text, code, message in (
            ("url: [unclosed\n", 2, f"error: config file {config}: expected ',' or ']'"),
            ('url: "http://[::1"\n', 1, "error: InvalidURL: "),
        ):
            config.write_text(text)
            result = subprocess.run(
                [AIPAAS, "get", "jobs"],
                env={**env, "AIPAAS_CONFIG": str(config)},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == code, result.stderr
            assert one_error_line(result.stderr).startswith(message)

    def test_version(self) -> None:
        result = CliRunner().invoke(app, ["--version"])
        assert result.exit_code == 0
        assert result.stdout.strip() == f"aipaas {__version__}"


def complete(line: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash completion offers for ``line`` (the last word being typed)."""
    words = line.split(" ")
    result = CliRunner().invoke(
        app,
        [],
        prog_name="aipaas",
        env={
            "_AIPAAS_COMPLETE": "complete_bash",
            "COMP_WORDS": line,
            "COMP_CWORD": str(len(words) - 1),
            "AIPAAS_CONFIG": "/nonexistent",
            **(env or {}),
        },
    )
    assert result.exit_code == 0, result.output
    return result.stdout.split()


class TestCompletion:
    def test_kinds(self) -> None:
        offered = complete("aipaas get jo")
        assert "job" in offered and "jobs" in offered and "queue" not in offered

    def test_names_from_the_api(self, world: World) -> None:
        world.client().apply(job_yaml("train"))
        world.client().apply(job_yaml("tune"))
        env = {"AIPAAS_URL": world.url, "AIPAAS_TOKEN": world.alice}
        assert complete("aipaas get jobs t", env) == ["train", "tune"]
        assert complete("aipaas get job/tr", env) == ["job/train"]
        assert complete("aipaas cancel tu", env) == ["tune"]
        assert complete("aipaas cancel train t", env) == ["tune"]  # not what is given already
        assert complete("aipaas delete queue ", env) == ["batch", "research"]
        assert complete("aipaas delete job/train job/t", env) == ["job/tune"]
        assert complete("aipaas describe job tr", env) == ["train"]
        assert complete("aipaas wait job/", env) == ["job/train", "job/tune"]
        # Another tenant's member is offered none of them.
        assert complete("aipaas get jobs t", {**env, "AIPAAS_TOKEN": world.rick}) == []

    def test_quiet_when_the_api_cannot_answer(self) -> None:
        env = {"AIPAAS_URL": "http://127.0.0.1:9", "AIPAAS_TOKEN": "x"}
        assert complete("aipaas get jobs t", env) == []


class TestAllocateSeveralFiles:
    def test_classes_slices_and_claims_in_separate_files(self, tmp_path: Path) -> None:
        documents = EXAMPLE.read_text().split("\n---\n")
        claims = [d for d in documents if "kind: ResourceClaim" in d]
        others = [d for d in documents if "kind: ResourceClaim" not in d]
        (tmp_path / "cluster.yaml").write_text("\n---\n".join(others))
        (tmp_path / "claims.yaml").write_text("\n---\n".join(claims))
        runner = CliRunner()
        args = ["allocate", "--dry-run", "-o", "json"]
        whole = runner.invoke(app, [*args, "-f", str(EXAMPLE)])
        split = runner.invoke(
            app, [*args, "-f", str(tmp_path / "cluster.yaml"), "-f", str(tmp_path / "claims.yaml")]
        )
        assert split.exit_code == 0, split.stderr
        assert json.loads(split.stdout) == json.loads(whole.stdout)
        assert json.loads(split.stdout)["fits"] is True
        missing = runner.invoke(app, [*args, "-f", str(EXAMPLE), "-f", str(tmp_path / "none")])
        assert missing.exit_code == 2 and "cannot read" in missing.stderr


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


class TestPortTaken:
    def test_up_with_a_taken_port_says_so_and_exits_7(self, held_port: int, tmp_path: Path) -> None:
        result = CliRunner().invoke(
            app, ["up", "--port", str(held_port), "--data-dir", str(tmp_path)]
        )
        assert result.exit_code == 7
        assert one_error_line(result.stderr) == (
            f"error: port {held_port} on 127.0.0.1 is taken by another program: "
            "choose another with --port"
        )

    def test_server_with_a_taken_port_too(self, held_port: int, tmp_path: Path) -> None:
        args = ["server", "--port", str(held_port), "--data-dir", str(tmp_path)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 7 and "is taken" in result.stderr

    def test_an_aipaas_server_on_the_port_is_named(self, world: World, tmp_path: Path) -> None:
        port = int(world.url.rsplit(":", 1)[1])
        result = CliRunner().invoke(app, ["up", "--port", str(port), "--data-dir", str(tmp_path)])
        assert result.exit_code == 7
        assert f"taken by an aipaas server already ({world.url})" in result.stderr

    def test_up_without_port_moves_on_and_says_so(
        self, held_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(control_server, "DEFAULT_PORT", held_port)
        served: dict[str, Any] = {}
        monkeypatch.setattr(control_server, "_serve", lambda s, **_: served.update(port=s.port))
        result = CliRunner().invoke(app, ["up", "--data-dir", str(tmp_path)])
        assert result.exit_code == 0
        assert served["port"] != held_port
        assert result.stderr.strip() == (
            f"port {held_port} on 127.0.0.1 is taken by another program; "
            f"using port {served['port']} instead (--port chooses)"
        )


class TestUpSuggestions:
    def test_commands_that_work_as_printed(self, tmp_path: Path) -> None:
        from aipaas.cli.control_runtime import try_lines

        bin_dir = Path(sys.executable).parent
        (tmp_path / "examples").mkdir()
        (tmp_path / "examples" / "hello.yaml").write_text("")
        # Not on PATH: the full path of this installation's command.
        lines = try_lines(tmp_path, "/usr/bin")
        assert lines[0] == f"{bin_dir / 'aipaas'} apply -f examples/hello.yaml"
        assert all(line.startswith(str(bin_dir / "aipaas")) for line in lines)
        # On PATH: the bare name; no example where there is none.
        assert try_lines(tmp_path / "examples", str(bin_dir)) == ["aipaas get nodes"]
