"""Before a task with datasets starts: its data in the node's cache, a view where it reads.

The local backend runs ``python -m aipaas.data.stage DIR`` instead of the runner: for each
dataset of DIR/stage.json it takes the entry's lock (waiting for a background load to finish),
fills what is missing (a hit when nothing was), takes a lease for the task (this process's
pid: the runner it becomes keeps it) and links the task's path to the entry's read-only data.
Then it removes stage.json (the credentials) and becomes the runner (exec, same pid), so the
backend's records see one process from start to end. A dataset that cannot be had ends the
task with EXIT_NO_DATA and says why in the task's log.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from aipaas.data.cache import NodeCache
from aipaas.data.copier import cached, fill
from aipaas.data.entry import write_atomic
from aipaas.data.source import SourceSpec

STAGE_FILE = "stage.json"
EXIT_NO_DATA = 66  # EX_NOINPUT


def stage(directory: Path, spec: dict[str, Any]) -> None:
    cache = NodeCache(Path(spec["cache_root"]), int(spec["capacity"]))
    request_id = directory.name
    for item in spec["datasets"]:
        entry = cache.entry(item["key"])
        with entry.locked():
            source = SourceSpec.from_json(item["source"])
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
        print(f"aipaas: the task's datasets could not be had: {err}", file=sys.stderr, flush=True)
        write_atomic(directory / "exit", f"{EXIT_NO_DATA}\n")
        return EXIT_NO_DATA
    finally:
        (directory / STAGE_FILE).unlink(missing_ok=True)
    runner = str(spec["runner"])
    os.execv(sys.executable, [sys.executable, "-I", runner, str(directory)])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
