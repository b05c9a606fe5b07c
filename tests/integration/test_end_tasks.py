"""tests.support.server_process.end_tasks: a fixture's end kills the task runners a stopped server
left in its run directory, with the commands they started (in the runner's process group), and
nothing else."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.support.server_process import end_tasks

# a stand-in for the local backend's runner.py: given its attempt's directory, it leads a
# process group of its own and starts the command in it
RUNNER = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen(['sleep', '120'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start(attempt: Path) -> tuple[subprocess.Popen[str], int]:
    attempt.mkdir(parents=True)
    script = attempt.parents[2] / "runner.py"
    script.write_text(RUNNER)
    runner = subprocess.Popen(
        [sys.executable, str(script), str(attempt)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert runner.stdout is not None
    return runner, int(runner.stdout.readline())


def test_the_runners_of_a_data_dir_and_their_commands_are_killed(tmp_path: Path) -> None:
    ours, ours_child = _start(tmp_path / "data" / "run" / "job-1")
    other, other_child = _start(tmp_path / "other" / "run" / "job-2")
    try:
        killed = end_tasks(tmp_path / "data" / "run")
        assert killed == [ours.pid]
        ours.wait(30)
        deadline = time.monotonic() + 30
        while _alive(ours_child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(ours_child)
        assert other.poll() is None and _alive(other_child)
    finally:
        end_tasks(tmp_path / "other" / "run")
        other.wait(30)
