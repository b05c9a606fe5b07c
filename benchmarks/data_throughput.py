"""Read throughput of a task: from a warm node cache against straight from the S3 server.

A moto S3 server (``moto[server]``) is started on a free port; a dataset of ``--size-gib``
(default 1 GiB) of seeded random bytes in ``--files`` objects is uploaded; the node cache
(data/cache.py, data/copier.py) is filled from it once (the cold load, timed); then a task
process reads every byte, ``--repeats`` times each way, and the median is reported:

- warm cache: the task reads the cache entry's files (what a task's mount points at);
- direct: the task reads the objects from the S3 server through fsspec/s3fs (what a task
  without a cache does), sequentially with 8 MiB reads.

Both tasks hash what they read (SHA-256), so a mode that read wrong bytes fails the run.
Target (issue 13): the warm cache at least 5x faster than the direct read.

    .venv/bin/python benchmarks/data_throughput.py [--size-gib 1] [--files 8] [--seed 7]
        [--doc docs/data.md]   # also write the table between the doc's markers
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from aipaas.data.cache import NodeCache
from aipaas.data.copier import fill
from aipaas.data.source import SourceSpec

BUCKET = "bench"
KEY, SECRET = "bench-key", "bench-secret"
GIB = 1 << 30

TASK_CACHE = """
import hashlib, json, pathlib, sys, time
start = time.perf_counter(); digest = hashlib.sha256(); total = 0
for path in sorted(p for p in pathlib.Path(sys.argv[1]).rglob("*") if p.is_file()):
    with open(path, "rb") as handle:
        while chunk := handle.read(8 << 20):
            digest.update(chunk); total += len(chunk)
print(json.dumps({"bytes": total, "seconds": time.perf_counter() - start,
                  "sha256": digest.hexdigest()}))
"""

TASK_S3 = """
import hashlib, json, sys, time
import fsspec
start = time.perf_counter(); digest = hashlib.sha256(); total = 0
fs = fsspec.filesystem("s3", key=sys.argv[2], secret=sys.argv[3], skip_instance_cache=True,
                       client_kwargs={"endpoint_url": sys.argv[1]})
for path in sorted(fs.find(sys.argv[4])):
    with fs.open(path, "rb", block_size=8 << 20) as handle:
        while chunk := handle.read(8 << 20):
            digest.update(chunk); total += len(chunk)
print(json.dumps({"bytes": total, "seconds": time.perf_counter() - start,
                  "sha256": digest.hexdigest()}))
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_moto(port: int, log: Path) -> subprocess.Popen[bytes]:
    import httpx

    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-p", str(port)], stdout=out, stderr=out
        )
    for _ in range(300):
        try:
            httpx.get(f"http://127.0.0.1:{port}/moto-api/", timeout=1)
            return process
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"moto did not start: {log.read_text()[-2000:]}")


def _upload(endpoint: str, size: int, files: int, seed: int) -> str:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    rng = np.random.default_rng(seed)
    digest = hashlib.sha256()
    each = size // files
    for index in range(files):
        body = rng.bytes(each if index < files - 1 else size - each * (files - 1))
        digest.update(body)
        client.put_object(Bucket=BUCKET, Key=f"ds/part-{index:03d}.bin", Body=body)
    return digest.hexdigest()


def _task(code: str, *args: str) -> dict[str, float | str]:
    answer = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    result: dict[str, float | str] = json.loads(answer.stdout)
    return result


def _mib_s(result: dict[str, float | str]) -> float:
    return float(result["bytes"]) / float(result["seconds"]) / (1 << 20)


def run(size_gib: float, files: int, seed: int, repeats: int) -> list[tuple[str, ...]]:
    size = int(size_gib * GIB)
    with tempfile.TemporaryDirectory(prefix="aipaas-data-bench-") as scratch:
        root = Path(scratch)
        port = _free_port()
        endpoint = f"http://127.0.0.1:{port}"
        moto = _start_moto(port, root / "moto.log")
        try:
            expected = _upload(endpoint, size, files, seed)
            spec = SourceSpec(
                f"s3://{BUCKET}/ds",
                endpoint=endpoint,
                credentials={"accessKeyId": KEY, "secretAccessKey": SECRET},
            )
            cache = NodeCache(root / "cache", 2 * size)
            entry = cache.entry("bench/ds-1")
            start = time.perf_counter()
            with entry.locked():
                filled = fill(entry, spec, reserve=cache.room_for(entry))
            cold = time.perf_counter() - start
            warm = [_task(TASK_CACHE, str(entry.data)) for _ in range(repeats)]
            direct = [_task(TASK_S3, endpoint, KEY, SECRET, f"{BUCKET}/ds") for _ in range(repeats)]
        finally:
            moto.terminate()
            moto.wait(10)
    for result in (*warm, *direct):
        if result["sha256"] != expected or int(result["bytes"]) != size:
            raise SystemExit(f"a task read wrong bytes: {result}")
    warm_rate = statistics.median(_mib_s(r) for r in warm)
    direct_rate = statistics.median(_mib_s(r) for r in direct)
    load_rate = filled.copied_bytes / cold / (1 << 20)
    gib = f"{size / GIB:g} GiB"
    return [
        ("read", "size", "MiB/s (median)", "seconds", "vs direct"),
        ("task from warm cache", gib, f"{warm_rate:,.0f}", f"{size / warm_rate / 2**20:.2f}",
         f"{warm_rate / direct_rate:.1f}x"),
        ("task direct from S3 (moto)", gib, f"{direct_rate:,.0f}",
         f"{size / direct_rate / 2**20:.2f}", "1.0x"),
        ("cold load S3 -> cache (copier, 4 streams)", gib, f"{load_rate:,.0f}", f"{cold:.2f}",
         "-"),
    ]  # fmt: skip


def table(rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join(" --- " for _ in rows[0]) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--doc", type=Path, help="splice the table into this file's markers")
    args = parser.parse_args()
    rows = run(args.size_gib, args.files, args.seed, args.repeats)
    note = (
        f"`benchmarks/data_throughput.py --size-gib {args.size_gib:g} --files {args.files} "
        f"--seed {args.seed} --repeats {args.repeats}`, on {os.cpu_count()} cores shared with "
        "other work. Both tasks hash every byte with SHA-256 (it bounds the warm read); the "
        "warm read comes from the page cache where the entry fits in memory, as on a node "
        "whose cache was just read or filled."
    )
    text = f"{table(rows)}\n\n{note}"
    print(text)
    if args.doc is not None:
        splice(args.doc, text)


def splice(doc: Path, text: str) -> None:
    """Replace what lies between the data_throughput markers of ``doc``."""
    begin, end = "<!-- data_throughput:begin -->", "<!-- data_throughput:end -->"
    content = doc.read_text()
    if begin not in content or end not in content:
        raise SystemExit(f"{doc} has no {begin} ... {end} markers")
    head, rest = content.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{begin}\n{text}\n{end}{tail}")


if __name__ == "__main__":
    main()
