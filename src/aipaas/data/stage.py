"""Before a task with datasets starts: its data in the node's cache, a view where it reads.

The local backend runs ``python -m aipaas.data.stage DIR`` instead of the runner: for each
dataset of DIR/stage.json it takes the entry's lock (waiting for a background load to finish),
fills what is missing (a hit when nothing was), takes a lease for the task (this process's
pid: the runner it becomes keeps it) and links the task's path to the entry's read-only data.
Then it removes stage.json (the credentials) and becomes the runner (exec, same pid), so the
backend's records see one process from start to end. A dataset that cannot be had ends the
task with EXIT_NO_DATA and says why in the task's log. A task with outputs (``spec.outputs``)
gets its empty output directories, runs under a runner of its own, and its outputs are
uploaded before its exit code is written (``run_then_upload``): after exit code 0, or after
any end for an output with ``uploadOn: Always``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from aipaas.data.cache import NodeCache
from aipaas.data.copier import cached, fill
from aipaas.data.entry import write_atomic
from aipaas.data.source import SourceSpec, refused_or
from aipaas.data.stream import set_task_variables, stream_variables
from aipaas.data.upload import upload

STAGE_FILE = "stage.json"
LAUNCH_FILE = "launch.json"  # the runner's (backends/local/runner.py)
EXIT_NO_DATA = 66  # EX_NOINPUT
EXIT_UPLOAD = 74  # EX_IOERR


def stage(directory: Path, spec: dict[str, Any]) -> None:
    _output_dirs(spec)
    cache = NodeCache(Path(spec["cache_root"]), int(spec["capacity"]))
    request_id = directory.name
    for item in spec["datasets"]:
        entry = cache.entry(item["key"])
        source = SourceSpec.from_json(item["source"])
        streamed = stream_variables(item, entry, source)  # a cold cache, streaming allowed
        if streamed is not None:
            set_task_variables(directory, streamed)
            print(f"aipaas: dataset {item['name']}: read from the source (cache cold)", flush=True)
            continue
        with entry.locked():
            found = cached(entry, source)
            result = found or fill(entry, source, reserve=cache.room_for(entry))
            entry.add_lease(request_id, os.getpid())
            hit = found is not None
            entry.update_stats(
                hits=int(hit),
                misses=int(not hit),
                bytes_from_source=result.copied_bytes,
                bytes_from_cache=result.size_bytes - result.copied_bytes,
                last_used=_now(),
            )
        _share(entry.path.parent, spec.get("gid"))
        _link(Path(item["link"]), entry.data)
        print(
            f"aipaas: dataset {item['name']}: {'cached' if hit else 'loaded'}"
            f" ({result.files} files, {result.size_bytes} bytes,"
            f" {result.copied_bytes} from the source)",
            flush=True,
        )


def _output_dirs(spec: dict[str, Any]) -> None:
    """Each output directory, empty and the task's (the task writes nothing else of ours)."""
    for output in spec.get("outputs") or ():
        path = Path(output["path"])
        path.mkdir(parents=True, exist_ok=True)
        if spec.get("uid") is not None:
            os.chown(path, spec["uid"], spec["gid"])


def run_then_upload(directory: Path, spec: dict[str, Any]) -> int:
    """Run the task under a runner of its own (DIR/task), then upload its outputs and only
    then write DIR/exit: the backend sees the task end once its results are stored. A failed
    or stopped task uploads only its outputs marked ``always`` (``uploadOn: Always``; a stopped
    one within its grace period, after which the whole group is killed). A failed upload fails
    a task that succeeded (EXIT_UPLOAD, said in its log); a task that failed keeps its own
    exit code, the upload's failure said in its log."""
    inner = directory / "task"
    inner.mkdir(mode=0o700, exist_ok=True)
    shutil.copy2(directory / LAUNCH_FILE, inner / LAUNCH_FILE)
    stopped: list[int] = []
    # A stop reaches the whole process group: the runner forwards it to the task; the stage
    # only notes it and waits for the runner.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda n, _frame: stopped.append(n))
    child = subprocess.Popen([sys.executable, "-I", str(spec["runner"]), str(inner)])
    while True:
        try:
            child.wait()
            break
        except InterruptedError:
            continue
    try:
        code = int((inner / "exit").read_text().strip())
    except (OSError, ValueError):
        code = EXIT_UPLOAD
    succeeded = code == 0 and not stopped and not (directory / "stop").exists()
    for output in spec.get("outputs") or ():
        if not (succeeded or output.get("always")):
            continue
        destination = SourceSpec.from_json(output["destination"])
        try:
            sent = upload(Path(output["path"]), destination, owner=spec.get("uid"))
        except Exception as err:
            print(f"aipaas: uploading {output['path']} failed: {err}", flush=True)
            if succeeded:
                code = EXIT_UPLOAD
                break
            continue
        print(f"aipaas: uploaded {sent} bytes of {output['path']}", flush=True)
    write_atomic(directory / "exit", f"{code}\n")
    return 0


def _now() -> float:
    import time

    return time.time()


def _share(tenant_dir: Path, gid: int | None) -> None:
    """Tasks run as their tenant's user: its group may read the tenant's entries, no other."""
    if gid is None:
        return
    os.chown(tenant_dir, -1, gid)
    os.chmod(tenant_dir, 0o750)
    os.chmod(tenant_dir.parent, 0o711)


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    temporary = link.with_name(f".{link.name}.aipaas-link")
    temporary.unlink(missing_ok=True)
    os.symlink(target, temporary)
    os.replace(temporary, link)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m aipaas.data.stage DIR", file=sys.stderr)
        return 2
    directory = Path(argv[0])
    spec = json.loads((directory / STAGE_FILE).read_text())
    try:
        stage(directory, spec)
    except Exception as err:
        said = refused_or(str(err))  # a refused connection, however the library reported it
        print(f"aipaas: the task's datasets could not be had: {said}", file=sys.stderr, flush=True)
        write_atomic(directory / "exit", f"{EXIT_NO_DATA}\n")
        return EXIT_NO_DATA
    finally:
        (directory / STAGE_FILE).unlink(missing_ok=True)  # the credentials: in memory only
    if spec.get("outputs"):
        return run_then_upload(directory, spec)
    runner = str(spec["runner"])
    os.execv(sys.executable, [sys.executable, "-I", runner, str(directory)])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
