"""Runs ``aipaas ...`` with an in-process sampling profiler (py-spy is not installed here):
every 5 ms a thread reads every other thread's Python stack and counts, per thread name, the
functions on it (inclusive) and at its top (exclusive). At exit (SIGTERM included) the counts
go to a text file, the functions with the most samples first.

Who calls it: benchmarks/kube_side_by_side.py with ``--profile FILE`` runs the server as

    python benchmarks/_kube_profile.py FILE server --backend kubernetes ...
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections import Counter
from pathlib import Path
from types import FrameType

from aipaas.cli.app import main

INTERVAL = 0.005


class Sampler:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.inclusive: Counter[tuple[str, str]] = Counter()
        self.exclusive: Counter[tuple[str, str]] = Counter()
        self.samples: Counter[str] = Counter()
        #: (thread, "function <- its caller") at the top of the stack
        self.callers: Counter[tuple[str, str]] = Counter()
        #: thread name -> its OS thread id, and its CPU seconds when last read (every second:
        #: a thread that ended before the end is still counted)
        self.native: dict[str, int] = {}
        self.cpu: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="sampler")

    def _run(self) -> None:
        names = {}
        rounds = 0
        while not self.stop.wait(INTERVAL):
            rounds += 1
            if rounds % 200 == 0:
                for name, native_id in self.native.items():
                    self.cpu[name] = max(self.cpu.get(name, 0.0), _thread_cpu(native_id))
            for thread in threading.enumerate():
                if thread.ident is not None:
                    names[thread.ident] = thread.name
                    if thread.native_id is not None:
                        self.native[thread.name] = thread.native_id
            for ident, frame in sys._current_frames().items():
                if ident == self.thread.ident:
                    continue
                name = names.get(ident, str(ident))
                if _idle(frame):
                    continue
                self.samples[name] += 1
                self.exclusive[(name, _where(frame))] += 1
                back = frame.f_back  # read once: the thread runs on while it is sampled
                if back is not None:
                    self.callers[(name, f"{_where(frame)} <- {_where(back)}")] += 1
                seen = set()
                current: FrameType | None = frame
                while current is not None:
                    where = _where(current)
                    if where not in seen:
                        seen.add(where)
                        self.inclusive[(name, where)] += 1
                    current = current.f_back

    def write(self) -> None:
        self.stop.set()
        lines = [f"samples every {INTERVAL * 1000:.0f} ms of busy threads"]
        for thread, count in self.samples.most_common():
            cpu = max(self.cpu.get(thread, 0.0), _thread_cpu(self.native.get(thread)))
            lines.append(
                f"thread {thread}: {count} samples ({count * INTERVAL:.1f} s), CPU {cpu:.1f} s"
            )
        for thread, _ in self.samples.most_common():
            lines.append(f"\n{thread}: inclusive (function on the stack)")
            mine = Counter({w: c for (t, w), c in self.inclusive.items() if t == thread})
            lines.extend(f"{count:8d} {where}" for where, count in mine.most_common(150))
            lines.append(f"{thread}: exclusive (function at the top)")
            mine = Counter({w: c for (t, w), c in self.exclusive.items() if t == thread})
            lines.extend(f"{count:8d} {where}" for where, count in mine.most_common(25))
            lines.append(f"{thread}: exclusive, by caller")
            mine = Counter({w: c for (t, w), c in self.callers.items() if t == thread})
            lines.extend(f"{count:8d} {where}" for where, count in mine.most_common(40))
        self.out.write_text("\n".join(lines) + "\n")


def _thread_cpu(native_id: int | None) -> float:
    """User and system CPU seconds of one of this process's threads (0 if it has ended)."""
    try:
        stat = Path(f"/proc/self/task/{native_id}/stat").read_text()
    except (OSError, TypeError):
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _where(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    short = path.split("site-packages/")[-1].split("src/")[-1]
    return f"{code.co_name} ({short}:{code.co_firstlineno})"


_IDLE = {"wait", "select", "_wait_for_tstate_lock", "poll", "accept", "get", "_worker"}


def _idle(frame: FrameType) -> bool:
    """A thread blocked in a wait, a select or an empty queue's get is not busy."""
    return frame.f_code.co_name in _IDLE


if __name__ == "__main__":
    sampler = Sampler(Path(sys.argv[1]))
    sampler.thread.start()
    atexit.register(sampler.write)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.argv = ["aipaas", *sys.argv[2:]]
    main()
