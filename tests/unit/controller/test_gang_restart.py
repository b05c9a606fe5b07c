"""A job that restarts as a gang (``spec.restartPolicy: OnFailure`` of the job), with real
processes on the local backend: a failed rank stops every other rank (one SIGTERM, the job's
grace) and the whole gang starts again once all have stopped; one backoff count for the job;
a task's own restart policy still restarts it alone first."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aipaas.backends.local import LocalBackend
from aipaas.controller import gang_restart
from aipaas.controller.cycle import Controller
from aipaas.controller.lifecycle import Stop
from aipaas.store import TaskRecord
from tests.support.ctl_world import World, cycle_until

GANG = "  restartPolicy: OnFailure\n  terminationGracePeriodSeconds: 5\n"

# Each attempt of each rank writes what it lived through under OUT: its start and end times,
# the SIGTERMs it got. Rank FAIL_RANK exits 1 in its first attempt after a moment; the others
# run until stopped (then take a second to stop, as a checkpoint would) or, in a later attempt,
# end at once with 0.
SCRIPT = """
import os, signal, sys, time
out = os.path.join({out!r}, os.environ["RANK"] + "." + os.environ["AIPAAS_ATTEMPT"])
def note(line):
    with open(out, "a") as f:
        f.write(line + "\\n")
def on_term(signum, frame):
    note("term %f" % time.time())
    time.sleep(1)
    note("end %f" % time.time())
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
note("start %f" % time.time())
if os.environ["AIPAAS_ATTEMPT"] != "0":
    sys.exit(0)
if os.environ["RANK"] == {fail_rank!r}:
    time.sleep(0.5)
    sys.exit(1)
time.sleep(60)
"""


def local(world: World) -> Controller:
    backend = LocalBackend(
        world.tmp / "run", node_name="here", cpu_milli=8000, memory_mib=8192, gpus=[]
    )
    return world.controller(backend, None, backoff_seconds=0.05)


def ranks(script: str, *, replicas: int, policy: str = "Never", limit: int = 0) -> str:
    return (
        f"    - name: worker\n      replicas: {replicas}\n"
        f"      command: [{sys.executable}, -c, {json.dumps(script)}]\n"
        f"      resources: {{cpu: 1, memory: 64Mi}}\n"
        f"      restartPolicy: {policy}\n      backoffLimit: {limit}\n"
    )


def lines(path: Path, word: str) -> list[float]:
    return [
        float(line.split()[1]) for line in path.read_text().splitlines() if line.startswith(word)
    ]


class TestGangRestart:
    def test_a_failed_rank_restarts_every_rank_after_all_have_stopped(
        self, world: World, tmp_path: Path
    ) -> None:
        world.setup()
        controller = local(world)
        out = tmp_path / "out"
        out.mkdir()
        world.submit(
            "ddp", ranks(SCRIPT.format(out=str(out), fail_rank="1"), replicas=3), extra=GANG
        )
        cycle_until(controller, lambda: world.phase("ddp") == "Succeeded", timeout=60)
        status = world.job("ddp").status
        assert status is not None and status.restarts == 1
        assert [t.restarts for t in status.tasks] == [1, 1, 1]
        assert world.reasons("ddp").count("GangRestarting") == 1
        # The ranks that did not fail got exactly one SIGTERM and their grace to stop in.
        for rank in ("0", "2"):
            assert len(lines(out / f"{rank}.0", "term")) == 1
            assert len(lines(out / f"{rank}.0", "end")) == 1
        # Every rank ran a second attempt, none of them before the last old rank had stopped.
        old_ends = lines(out / "0.0", "end") + lines(out / "2.0", "end")
        new_starts = [lines(out / f"{rank}.1", "start")[0] for rank in ("0", "1", "2")]
        assert min(new_starts) >= max(old_ends)

    def test_the_gang_backoff_limit_counts_once_per_job(self, world: World) -> None:
        world.setup()
        controller = local(world)
        world.submit(
            "crashing",
            ranks("raise SystemExit(2)", replicas=2),
            extra="  restartPolicy: OnFailure\n  backoffLimit: 2\n",
        )
        cycle_until(controller, lambda: world.phase("crashing") == "Failed", timeout=60)
        status = world.job("crashing").status
        assert status is not None and status.restarts == 2
        # Both ranks fail in every attempt: two restarts of the job, not two per rank.
        assert [t.restarts for t in status.tasks] == [2, 2]
        assert world.reasons("crashing").count("GangRestarting") == 2
        assert "after 2 restarts of the gang (spec.backoffLimit 2)" in status.message
        assert "exit code 2" in status.message

    def test_a_task_with_its_own_restart_policy_restarts_alone_first(
        self, world: World, tmp_path: Path
    ) -> None:
        world.setup()
        controller = local(world)
        marker = tmp_path / "tried"
        # Rank 1 fails once, then succeeds; rank 0 succeeds after rank 1 has run twice.
        script = (
            "import os, sys, time\n"
            f"p = {str(marker)!r}\n"
            "if os.environ['RANK'] == '1':\n"
            "    first = not os.path.exists(p)\n"
            "    open(p, 'a').write('x')\n"
            "    sys.exit(1 if first else 0)\n"
            "while not (os.path.exists(p) and len(open(p).read()) == 2):\n"
            "    time.sleep(0.05)\n"
        )
        world.submit("alone", ranks(script, replicas=2, policy="OnFailure", limit=1), extra=GANG)
        cycle_until(controller, lambda: world.phase("alone") == "Succeeded", timeout=60)
        status = world.job("alone").status
        assert status is not None and status.restarts is None
        assert [t.restarts for t in status.tasks] == [0, 1]
        assert "GangRestarting" not in world.reasons("alone")
        assert world.reasons("alone").count("TaskRestarting") == 1

    def test_a_task_past_its_own_limit_restarts_the_gang(self, world: World) -> None:
        world.setup()
        controller = local(world)
        # Both ranks fail every time: each first restarts alone once (its own limit, which
        # counts over the job's life: a gang restart gives it no more), then the gang restarts
        # once (the job's limit), then the job fails.
        world.submit(
            "both",
            ranks("raise SystemExit(3)", replicas=2, policy="OnFailure", limit=1),
            extra="  restartPolicy: OnFailure\n  backoffLimit: 1\n",
        )
        cycle_until(controller, lambda: world.phase("both") == "Failed", timeout=60)
        status = world.job("both").status
        assert status is not None and status.restarts == 1
        assert world.reasons("both").count("GangRestarting") == 1
        # The gang's restart gave each rank one attempt more; a rank's own restart came
        # before it when the rank's first failure was seen before the other rank's second
        # (the cycles' timing decides that under load), so each ran two or three attempts.
        assert [t.restarts for t in status.tasks] in ([2, 2], [1, 2], [2, 1])
        assert "after 1 restarts of the gang" in status.message


def record(name: str, phase: str, **fields: object) -> TaskRecord:
    return TaskRecord("uid", "acme", "j", name, "worker", int(name[-1]), int(name[-1])).with_(
        phase=phase, node="here", request_id=f"uid.{name}.0", **fields
    )


class TestHeld:
    NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)

    def test_due_ranks_wait_while_another_still_stops(self) -> None:
        due = self.NOW - timedelta(seconds=1)
        records = [
            record("worker-0", "Pending", restart_after=due, stopping=True),
            record("worker-1", "Pending", restart_after=due),
        ]
        moved = gang_restart.held(records, self.NOW, 2.0)
        # both wait to one time: they become due together, once worker-0 has stopped
        later = self.NOW + timedelta(seconds=2)
        assert [(r.name, r.restart_after) for r in moved] == [
            ("worker-0", later),
            ("worker-1", later),
        ]

    def test_nothing_is_held_once_every_rank_has_stopped(self) -> None:
        due = self.NOW - timedelta(seconds=1)
        records = [
            record("worker-0", "Pending", restart_after=due),
            record("worker-1", "Pending", restart_after=due),
        ]
        assert gang_restart.held(records, self.NOW, 2.0) == []

    def test_an_unplaced_extra_is_left_to_the_scheduler(self) -> None:
        records = [
            record("worker-0", "Failed", exit_code=1),
            record("worker-1", "Running"),
            TaskRecord("uid", "acme", "j", "worker-2", "worker", 2, 2),  # never placed
        ]
        plan = gang_restart.restart(
            records,
            records[:1],
            restarts=0,
            now=self.NOW,
            backoff_seconds=1.0,
            backoff_max_seconds=60.0,
        )
        moved = [m.record for m in plan.moves]
        assert [r.name for r in moved] == ["worker-0", "worker-1"]
        assert [m.stop() for m in plan.moves] == [None, Stop("uid.worker-1.0")]
        assert all(r.phase == "Pending" and r.evictions == 1 for r in moved)
        assert plan.restarts == 1
