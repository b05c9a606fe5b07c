"""Runs ``aipaas ...`` with an in-process sampling profiler (py-spy is not installed here):
every 5 ms a thread reads every other thread's Python stack and counts, per thread name, the
functions on it (inclusive) and at its top (exclusive). At exit (SIGTERM included) the counts
go to a text file, the functions with the most samples first.

Who calls it: benchmarks/kube_side_by_side.py with ``--profile FILE`` runs the server as

    python benchmarks/_kube_profile.py FILE server --backend kubernetes ...
"""

from __future__ import annotations

import atexit
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
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="sampler")

    def _run(self) -> None:
        names = {}
        while not self.stop.wait(INTERVAL):
            for thread in threading.enumerate():
                if thread.ident is not None:
                    names[thread.ident] = thread.name
            for ident, frame in sys._current_frames().items():
                if ident == self.thread.ident:
                    continue
                name = names.get(ident, str(ident))
                if _idle(frame):
                    continue
                self.samples[name] += 1
                self.exclusive[(name, _where(frame))] += 1
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
            lines.append(f"thread {thread}: {count} samples ({count * INTERVAL:.1f} s)")
        for thread, _ in self.samples.most_common():
            lines.append(f"\n{thread}: inclusive (function on the stack)")
            mine = Counter({w: c for (t, w), c in self.inclusive.items() if t == thread})
            lines.extend(f"{count:8d} {where}" for where, count in mine.most_common(150))
            lines.append(f"{thread}: exclusive (function at the top)")
            mine = Counter({w: c for (t, w), c in self.exclusive.items() if t == thread})
            lines.extend(f"{count:8d} {where}" for where, count in mine.most_common(25))
        self.out.write_text("\n".join(lines) + "\n")


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
