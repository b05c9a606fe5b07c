"""`aipaas get`: output formats, selectors and filters, the job columns, against a real HTTP
server (cli_world.py)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.unit.cli.cli_world import World, job_yaml


def submit(world: World) -> None:
    client = world.client()
    client.apply(job_yaml("train", labels="{team: nlp, env: prod}", gpus=2))
    client.apply(job_yaml("probe", queue="batch", labels="{team: vision}"))
    client.apply(job_yaml("other", tenant="rival"))
    world.set_status("Job", "acme", "train", phase="Running", startTime="2026-01-01T00:00:00Z")


def names(out: str) -> list[str]:
    return [line.split()[0] for line in out.splitlines()[1:] if line.strip()]


class TestOutputFormats:
    def test_table_has_priority_gpus_age_and_duration(self, world: World) -> None:
        submit(world)
        out = world.ok("get", "jobs", "-t", "acme")
        header = out.splitlines()[0].split()
        for column in ("NAME", "QUEUE", "PHASE", "PRIORITY", "GPUS", "AGE", "DURATION"):
            assert column in header
        row = next(line.split() for line in out.splitlines() if line.split()[0] == "train")
        assert row[header.index("GPUS")] == "4"  # 2 replicas x 2 GPUs
        assert row[header.index("PHASE")] == "Running"
        assert row[header.index("PRIORITY")] == "normal"
        assert row[header.index("AGE")].endswith("s")  # seconds old
        assert row[header.index("DURATION")].endswith("d")  # running since 2026-01-01
        assert "MESSAGE" not in header

    def test_wide_adds_columns(self, world: World) -> None:
        submit(world)
        assert "MESSAGE" in world.ok("get", "jobs", "-t", "acme", "-o", "wide").splitlines()[0]

    def test_no_headers(self, world: World) -> None:
        submit(world)
        out = world.ok("get", "jobs", "-t", "acme", "--no-headers")
        assert [line.split()[0] for line in out.splitlines()] == ["train", "probe"]
        queues = world.ok("get", "queues", "-t", "acme", "--no-headers")
        assert sorted(line.split()[1] for line in queues.splitlines()) == ["batch", "research"]

    def test_name(self, world: World) -> None:
        submit(world)
        assert world.ok("get", "jobs", "-t", "acme", "-o", "name").split() == [
            "job/train",
            "job/probe",
        ]

    def test_json_yaml_of_one_and_of_several(self, world: World) -> None:
        submit(world)
        one = json.loads(world.ok("get", "job/train", "-t", "acme", "-o", "json"))
        assert one["metadata"]["name"] == "train"
        two = json.loads(world.ok("get", "jobs", "train", "probe", "-t", "acme", "-o", "json"))
        assert [j["metadata"]["name"] for j in two] == ["train", "probe"]
        listed = yaml.safe_load(world.ok("get", "jobs", "-t", "acme", "-o", "yaml"))
        assert {j["metadata"]["name"] for j in listed} == {"train", "probe"}

    def test_jsonpath(self, world: World) -> None:
        submit(world)
        out = world.ok("get", "jobs", "-t", "acme", "-o", "jsonpath={.items[*].metadata.name}")
        assert out.strip() == "train probe"
        template = '{range .items[*]}{.metadata.name}={.spec.queue}{"\\n"}{end}'
        out = world.ok("get", "jobs", "-t", "acme", "-o", f"jsonpath={template}")
        assert out.splitlines() == ["train=research", "probe=batch"]
        out = world.ok("get", "job", "train", "-t", "acme", "-o", "jsonpath={.status.phase}")
        assert out.strip() == "Running"
        running = '{.items[?(@.status.phase=="Running")].metadata.name}'
        assert world.ok("get", "jobs", "-t", "acme", "-o", f"jsonpath={running}").strip() == "train"

    def test_bad_output_and_bad_template_are_usage_errors(self, world: World) -> None:
        result = world.cli("get", "jobs", "-o", "xml")
        assert result.exit_code == 2 and "jsonpath=TEMPLATE" in result.stderr
        result = world.cli("get", "jobs", "-o", "jsonpath={.items[")
        assert result.exit_code == 2 and "jsonpath" in result.stderr


class TestSelectorsAndFilters:
    def test_label_selectors(self, world: World) -> None:
        submit(world)

        def get(*args: str) -> list[str]:
            return names(world.ok("get", "jobs", "-t", "acme", *args))

        assert get("-l", "team=nlp") == ["train"]
        assert get("-l", "team!=nlp") == ["probe"]
        assert get("-l", "env") == ["train"]
        assert get("-l", "!env") == ["probe"]
        assert get("-l", "team in (nlp,vision)") == ["train", "probe"]
        assert get("-l", "team notin (nlp)") == ["probe"]
        assert get("-l", "team=nlp,env=dev") == []

    def test_phase_and_queue(self, world: World) -> None:
        submit(world)

        def get(*args: str) -> list[str]:
            return names(world.ok("get", "jobs", "-t", "acme", *args))

        assert get("--phase", "running") == ["train"]
        assert get("--phase", "Pending,Running") == ["train", "probe"]
        assert get("--queue", "batch") == ["probe"]
        assert get("--queue", "batch", "--phase", "Running") == []

    def test_a_bad_selector_is_a_usage_error(self, world: World) -> None:
        result = world.cli("get", "jobs", "-l", "team=(x")
        assert result.exit_code == 2 and "selector" in result.stderr

    def test_a_tenant_sees_its_own_only(self, world: World) -> None:
        submit(world)
        assert names(world.ok("get", "jobs", token=world.alice)) == ["train", "probe"]
        assert names(world.ok("get", "jobs", token=world.rick)) == ["other"]
        result = world.cli("get", "jobs", "-t", "acme", token=world.rick)
        assert result.exit_code == 3


class TestApply:
    def test_a_directory_and_several_files(self, world: World, tmp_path: Path) -> None:
        folder = tmp_path / "jobs"
        folder.mkdir()
        (folder / "b.yaml").write_text(job_yaml("two"))
        (folder / "a.yml").write_text(job_yaml("one"))
        (folder / "notes.txt").write_text("not a manifest")
        single = tmp_path / "three.yaml"
        single.write_text(job_yaml("three"))
        out = world.ok("apply", "-f", str(folder), "-f", str(single))
        assert out.splitlines() == ["job/one created", "job/two created", "job/three created"]

    def test_unreadable_paths_are_usage_errors_before_anything_is_applied(
        self, world: World, tmp_path: Path
    ) -> None:
        good = tmp_path / "good.yaml"
        good.write_text(job_yaml("one"))
        result = world.cli("apply", "-f", str(good), "-f", str(tmp_path / "missing.yaml"))
        assert result.exit_code == 2 and "cannot read" in result.stderr
        (tmp_path / "empty").mkdir()
        assert world.cli("apply", "-f", str(tmp_path / "empty")).exit_code == 2
        assert world.client().list("job", "acme") == []
