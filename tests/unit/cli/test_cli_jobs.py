"""Commands that act on jobs: cancel and delete by several names or a selector, rerun, wait,
logs -f that waits for the start and says why."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from aipaas.client import WaitFailed, WaitTimeout
from aipaas.errors import NotFound
from tests.unit.cli.cli_world import World, job_yaml

_STARTED: list[threading.Thread] = []


def later(seconds: float, *actions: Callable[[], object]) -> None:
    def run() -> None:
        for action in actions:
            time.sleep(seconds)
            action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    _STARTED.append(thread)


@pytest.fixture(autouse=True)
def _actions_end_before_the_server(world: World) -> Iterator[None]:
    yield
    while _STARTED:
        _STARTED.pop().join(10)


def submit(world: World, *names: str, queue: str = "research", labels: str = "{}") -> None:
    client = world.client()
    for name in names:
        client.apply(job_yaml(name, queue=queue, labels=labels))


def notes_of(world: World, name: str) -> dict[str, str]:
    return dict(world.store.get("Job", "acme", name).metadata.annotations)


CANCEL = "aipaas.dev/cancel-requested"


class TestCancelAndDelete:
    def test_cancel_several_names_in_either_form(self, world: World) -> None:
        submit(world, "a", "b", "c")
        out = world.ok("cancel", "job/a", "job/b", "-t", "acme")
        assert out.splitlines() == ["job a cancelling", "job b cancelling"]
        assert CANCEL in notes_of(world, "a") and CANCEL in notes_of(world, "b")
        assert CANCEL not in notes_of(world, "c")
        world.ok("cancel", "c", "-t", "acme")
        assert CANCEL in notes_of(world, "c")

    def test_cancel_by_selector_and_queue_skips_finished_jobs(self, world: World) -> None:
        submit(world, "a", "b", labels="{team: nlp}")
        submit(world, "c", queue="batch", labels="{team: nlp}")
        submit(world, "d")
        world.set_status("Job", "acme", "b", phase="Succeeded")
        out = world.ok("cancel", "-l", "team=nlp", "--queue", "research", "-t", "acme")
        assert out.splitlines() == ["job a cancelling"]
        assert CANCEL not in notes_of(world, "c") and CANCEL not in notes_of(world, "d")

    def test_one_missing_name_does_not_stop_the_others(self, world: World) -> None:
        submit(world, "a", "b")
        result = world.cli("cancel", "a", "nope", "b", "-t", "acme")
        assert result.exit_code == 3
        assert result.stdout.splitlines() == ["job a cancelling", "job b cancelling"]
        assert result.stderr.strip() == "error: job nope not found"

    def test_names_or_a_selector_are_needed_and_not_both(self, world: World) -> None:
        assert world.cli("cancel", "-t", "acme").exit_code == 2
        assert world.cli("cancel", "a", "-l", "x=y", "-t", "acme").exit_code == 2
        assert world.cli("delete", "jobs", "-t", "acme").exit_code == 2
        assert world.cli("cancel", "queue/research", "-t", "acme").exit_code == 2

    def test_delete_several_and_by_phase(self, world: World) -> None:
        submit(world, "a", "b", "c")
        for name in ("a", "b"):
            world.set_status("Job", "acme", name, phase="Failed")
        out = world.ok("delete", "jobs", "--phase", "Failed", "-t", "acme")
        assert out.splitlines() == ["job a deleted", "job b deleted"]
        world.client().apply(job_yaml("d"))
        out = world.ok("delete", "job/c", "job/d", "-t", "acme")
        assert out.splitlines() == ["job c deleting", "job d deleting"]
        out = world.ok("delete", "queue", "batch", "-t", "acme")
        assert out.strip() == "queue batch deleted"

    def test_a_tenant_cannot_cancel_or_delete_another_tenants_jobs(self, world: World) -> None:
        submit(world, "a")
        assert world.cli("cancel", "a", "-t", "acme", token=world.rick).exit_code == 3
        assert world.cli("cancel", "a", token=world.rick).exit_code == 3
        assert world.cli("delete", "jobs", "--all", token=world.rick).stderr == "nothing matched\n"
        assert CANCEL not in notes_of(world, "a")


class TestRerun:
    def test_a_new_job_from_the_spec_keeping_the_original(self, world: World) -> None:
        submit(world, "train", labels="{team: nlp}")
        world.set_status("Job", "acme", "train", phase="Failed", reason="Error")
        out = world.ok("rerun", "job/train", "-t", "acme")
        assert out.strip() == "job/train-2 created (rerun of job/train)"
        new = world.client().get("job", "train-2", "acme")
        old = world.client().get("job", "train", "acme")
        assert new["spec"] == old["spec"]
        assert new["metadata"]["labels"] == {"team": "nlp"}
        assert new["metadata"]["annotations"]["aipaas.io/rerun-of"] == "train"
        assert old["status"]["phase"] == "Failed"  # history kept
        # A rerun of the rerun, and of the original again: the next numbers of the same root.
        assert "job/train-3" in world.ok("rerun", "train-2", "-t", "acme")
        assert "job/train-4" in world.ok("rerun", "train", "-t", "acme")
        third = world.client().get("job", "train-3", "acme")["metadata"]["annotations"]
        assert third["aipaas.io/rerun-of"] == "train-2"
        assert third["aipaas.io/rerun-root"] == "train"

    def test_a_cancelled_job_reruns_without_its_cancel_mark(self, world: World) -> None:
        submit(world, "a")
        world.ok("cancel", "a", "-t", "acme")
        world.ok("rerun", "job/a", "-t", "acme")
        assert CANCEL not in notes_of(world, "a-2")

    def test_missing_job(self, world: World) -> None:
        assert world.cli("rerun", "job/nope", "-t", "acme").exit_code == 3


class TestWait:
    def test_until_the_phase(self, world: World) -> None:
        submit(world, "a")
        later(0.3, lambda: world.set_status("Job", "acme", "a", phase="Running"))
        later(0.6, lambda: world.set_status("Job", "acme", "a", phase="Succeeded"))
        result = world.cli(
            "wait", "job/a", "--for=phase=Succeeded", "--timeout", "10s", "-t", "acme"
        )
        assert result.exit_code == 0, result.stderr
        assert result.stdout.strip() == "job/a condition met"

    def test_timeout_exits_6(self, world: World) -> None:
        submit(world, "a")
        started = time.monotonic()
        result = world.cli(
            "wait", "job/a", "--for=phase=Succeeded", "--timeout", "1s", "-t", "acme"
        )
        assert result.exit_code == 6
        assert result.stderr.strip() == (
            "error: timed out after 1s waiting for phase=Succeeded on job/a"
        )
        assert time.monotonic() - started < 30  # at its timeout, not hung (a loaded machine)

    def test_a_job_that_ends_otherwise_fails_at_once(self, world: World) -> None:
        submit(world, "a")
        later(0.3, lambda: world.set_status("Job", "acme", "a", phase="Failed", reason="Error"))
        result = world.cli(
            "wait", "job/a", "--for=phase=Succeeded", "--timeout", "30s", "-t", "acme"
        )
        assert result.exit_code == 1
        assert result.stderr.strip() == "error: job a ended Failed (Error), not Succeeded"

    def test_for_delete_and_for_missing(self, world: World) -> None:
        submit(world, "a")
        world.set_status("Job", "acme", "a", phase="Succeeded")
        later(0.3, lambda: world.client().delete("job", "a", "acme"))
        result = world.cli("wait", "job/a", "--for=delete", "--timeout", "10s", "-t", "acme")
        assert result.exit_code == 0 and result.stdout.strip() == "job/a deleted"
        assert world.cli("wait", "job/a", "--for=delete", "-t", "acme").exit_code == 0
        assert world.cli("wait", "job/a", "-t", "acme").exit_code == 3

    def test_by_selector(self, world: World) -> None:
        submit(world, "a", "b", labels="{sweep: s1}")
        submit(world, "c")
        later(
            0.3,
            lambda: world.set_status("Job", "acme", "a", phase="Succeeded"),
            lambda: world.set_status("Job", "acme", "b", phase="Succeeded"),
        )
        out = world.ok("wait", "-l", "sweep=s1", "--for=phase=Succeeded", "-t", "acme")
        assert out.splitlines() == ["job/a condition met", "job/b condition met"]
        missing = world.cli("wait", "-l", "sweep=none", "-t", "acme")
        assert missing.exit_code == 3 and "nothing matched" in missing.stderr

    def test_jsonpath_and_create(self, world: World) -> None:
        later(0.3, lambda: submit(world, "late"))
        later(0.6, lambda: world.set_status("Job", "acme", "late", phase="Running"))
        made = world.cli("wait", "job/late", "--for=create", "--timeout", "10s", "-t", "acme")
        assert made.exit_code == 0 and made.stdout.strip() == "job/late created"
        running = world.cli(
            "wait", "job/late", "--for=jsonpath={.status.phase}=Running", "--timeout", "10s",
            "-t", "acme",
        )  # fmt: skip
        assert running.exit_code == 0, running.stderr
        quoted = "--for=jsonpath='{.spec.queue}'=research"
        assert world.cli("wait", "job/late", quoted, "-t", "acme").exit_code == 0
        exists = "--for=jsonpath={.status.phase}"  # any value
        assert world.cli("wait", "job/late", exists, "-t", "acme").exit_code == 0

    def test_bad_condition_and_timeout_are_usage_errors(self, world: World) -> None:
        assert world.cli("wait", "job/a", "--for=condition=Ready=maybe").exit_code == 2
        assert world.cli("wait", "job/a", "--for=jsonpath={.a[").exit_code == 2
        assert world.cli("wait", "job/a", "--for=ready").exit_code == 2
        assert world.cli("wait", "job/a", "--timeout", "soon").exit_code == 2

    def test_sdk(self, world: World) -> None:
        submit(world, "a")
        client = world.client(world.alice)
        later(0.3, lambda: world.set_status("Job", "acme", "a", phase="Running"))
        job = client.wait("job", "a", "phase=Running", timeout=60)
        assert job is not None and job["status"]["phase"] == "Running"
        assert client.wait("job", "a", lambda j: j["spec"]["queue"] == "research", timeout=60)
        with pytest.raises(WaitTimeout):
            client.wait("job", "a", "phase=Succeeded", timeout=0.5)
        world.set_status("Job", "acme", "a", phase="Cancelled")
        with pytest.raises(WaitFailed):
            client.wait("job", "a", "phase=Succeeded", timeout=60)
        with pytest.raises(NotFound):
            world.client(world.rick).wait("job", "a", "phase=Running", tenant="acme", timeout=60)


class TestLogsFollow:
    def test_says_why_it_waits_until_the_job_starts(self, world: World) -> None:
        submit(world, "a")
        world.set_status(
            "Job", "acme", "a", reason="Unschedulable", message="waiting for 2 GPUs in research"
        )
        later(
            0.4,
            lambda: world.set_status(
                "Job", "acme", "a", reason="Preempting", message="making room"
            ),
        )
        later(0.8, lambda: world.set_status("Job", "acme", "a", phase="Failed", reason="Error"))
        result = world.cli("logs", "-f", "job/a", "-t", "acme")
        assert result.exit_code == 0, result.stderr
        lines = result.stderr.splitlines()
        assert lines[0] == (
            "waiting for job/a to start: Unschedulable: waiting for 2 GPUs in research"
        )
        assert lines[1] == "still waiting for job/a: Preempting: making room"

    def test_gives_up_after_the_start_timeout(self, world: World) -> None:
        submit(world, "a")
        world.set_status("Job", "acme", "a", reason="Unschedulable", message="no GPUs free")
        result = world.cli("logs", "-f", "job/a", "-t", "acme", "--start-timeout", "1s")
        assert result.exit_code == 6
        assert result.stderr.splitlines()[-1] == (
            "error: job/a did not start within 1s: Unschedulable: no GPUs free"
        )

    def test_without_follow_a_pending_job_says_it_has_not_started(self, world: World) -> None:
        submit(world, "a")
        world.set_status("Job", "acme", "a", reason="Unschedulable", message="no GPUs free")
        result = world.cli("logs", "job/a", "-t", "acme")
        assert result.exit_code == 0
        assert result.stdout == ""
        assert result.stderr.strip() == "job/a has not started: Unschedulable: no GPUs free"
