"""The controller with real processes: restart policy with backoff, cancel, crash recovery."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from aipaas.backends.base import Backend, Inventory, LaunchRequest, TaskStatus
from aipaas.backends.local import LocalBackend
from aipaas.controller.cycle import Controller
from aipaas.store import TaskRepository
from tests.support.ctl_world import World, cycle_until


def local(world: World, **options: float) -> Controller:
    backend = LocalBackend(
        world.tmp / "run", node_name="here", cpu_milli=8000, memory_mib=8192, gpus=[]
    )
    return world.controller(backend, None, **options)


def python_task(script: str, *, replicas: int = 1, policy: str = "Never", limit: int = 0) -> str:
    return (
        f"    - name: worker\n      replicas: {replicas}\n"
        f"      command: [{sys.executable}, -c, {script!r}]\n"
        f"      resources: {{cpu: 1, memory: 64Mi}}\n"
        f"      restartPolicy: {policy}\n      backoffLimit: {limit}\n"
    )


class TestLocalJobs:
    def test_env_and_files(self, world: World, tmp_path: Path) -> None:
        world.setup()
        controller = local(world)
        out = tmp_path / "out"
        out.mkdir()
        script = (
            f"import os; open(os.path.join({str(out)!r}, os.environ['RANK']), 'w')"
            ".write(os.environ['WORLD_SIZE'] + ' ' + os.environ['MASTER_ADDR'] + ' '"
            " + os.environ['LOCAL_RANK'])"
        )
        world.submit("envs", python_task(script, replicas=2))
        cycle_until(controller, lambda: world.phase("envs") == "Succeeded")
        assert (out / "0").read_text() == "2 127.0.0.1 0"
        assert (out / "1").read_text() == "2 127.0.0.1 1"

    def test_failure_without_restart_fails_the_job(self, world: World) -> None:
        world.setup()
        controller = local(world)
        world.submit("bad", python_task("raise SystemExit(3)"))
        cycle_until(controller, lambda: world.phase("bad") == "Failed")
        status = world.job("bad").status
        assert status is not None and status.message == "worker-0 failed with exit code 3"

    def test_restarts_with_backoff_up_to_the_limit(self, world: World) -> None:
        world.setup()
        controller = local(world, backoff_seconds=0.05)
        world.submit("flaky", python_task("raise SystemExit(1)", policy="OnFailure", limit=2))
        cycle_until(controller, lambda: world.phase("flaky") == "Failed")
        status = world.job("flaky").status
        assert status is not None and status.tasks[0].restarts == 2
        assert world.reasons("flaky").count("TaskRestarting") == 2
        assert "after 2 restarts" in status.message

    def test_restart_then_success(self, world: World, tmp_path: Path) -> None:
        world.setup()
        controller = local(world, backoff_seconds=0.05)
        marker = tmp_path / "tried"
        script = (
            f"import os, sys; p = {str(marker)!r}; first = not os.path.exists(p); "
            "open(p, 'w').close(); sys.exit(1 if first else 0)"
        )
        world.submit("second-try", python_task(script, policy="OnFailure", limit=3))
        cycle_until(controller, lambda: world.phase("second-try") == "Succeeded")
        assert world.job("second-try").status.tasks[0].restarts == 1  # type: ignore[union-attr]

    def test_cancel_stops_processes(self, world: World, tmp_path: Path) -> None:
        world.setup()
        controller = local(world, stop_grace_seconds=1)
        out = tmp_path / "pids"
        out.mkdir()
        # Each task records its own pid and ignores SIGTERM: only the kill after the job's
        # grace period (terminationGracePeriodSeconds) ends it, so the stop takes a second.
        script = (
            "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            f"open(os.path.join({str(out)!r}, os.environ['RANK']), 'w').write(str(os.getpid()));"
            " time.sleep(60)"
        )
        world.submit(
            "long", python_task(script, replicas=2), extra="  terminationGracePeriodSeconds: 1\n"
        )
        cycle_until(
            controller, lambda: world.phase("long") == "Running" and len(list(out.iterdir())) == 2
        )
        pids = [int(p.read_text()) for p in out.iterdir()]
        world.service.cancel("long", "acme")
        controller.run_cycle()
        # The job waits until the backend confirms its tasks stopped: Cancelled only then.
        assert world.job("long").status.reason == "Stopping"  # type: ignore[union-attr]
        assert all(_alive(pid) for pid in pids)
        cycle_until(controller, lambda: world.phase("long") == "Cancelled")
        assert not any(_alive(pid) for pid in pids)


class TestCrashRecovery:
    def test_a_new_controller_adopts_running_tasks(self, world: World, tmp_path: Path) -> None:
        """A new controller and backend (the server restarted) find the task running, do not
        start it again, and see it finish."""
        world.setup()
        first = local(world)
        counter = tmp_path / "starts"
        script = f"import time; open({str(counter)!r}, 'a').write('x'); time.sleep(1.5)"
        world.submit("survivor", python_task(script, replicas=2))
        cycle_until(first, lambda: world.phase("survivor") == "Running")
        second = local(world)  # nothing shared with `first` but the store and the run dir
        cycle_until(second, lambda: world.phase("survivor") == "Succeeded")
        assert counter.read_text() == "xx"
        assert "TaskLost" not in world.reasons("survivor")

    def test_a_lost_start_is_asked_again(self, world: World, tmp_path: Path) -> None:
        """The records say Starting but the server died before the backend heard of it: the
        next controller starts each task exactly once."""
        world.setup()
        counter = tmp_path / "starts"
        crashing = local(world)
        crashing.backend = _NoStart(crashing.backend)  # records committed, starts never sent
        world.submit("late", python_task(f"open({str(counter)!r}, 'a').write('x')", replicas=2))
        crashing.run_cycle()
        uid = world.job("late").metadata.uid or ""
        assert [r.phase for r in TaskRepository(world.store).for_job(uid)] == ["Starting"] * 2
        assert not counter.exists()
        recovered = local(world)
        cycle_until(recovered, lambda: world.phase("late") == "Succeeded")
        assert counter.read_text() == "xx"


class _NoStart:
    """A backend whose process 'crashes' before any start reaches the machine."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name

    def inventory(self) -> Inventory:
        return self.inner.inventory()

    def start(self, request: LaunchRequest) -> None:
        return None

    def stop(self, request_id: str, grace_seconds: float = 5.0) -> None:
        self.inner.stop(request_id, grace_seconds)

    def status(self, request_ids: Sequence[str]) -> dict[str, TaskStatus]:
        return self.inner.status(request_ids)

    def close(self) -> None:
        self.inner.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
