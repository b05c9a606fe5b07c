"""Log reads by range: a tail read from the end, streams in blocks, a byte limit per answer;
memory stays bounded however large the file."""

from __future__ import annotations

import os
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from aipaas.server.logs import CHUNK, MAX_LINE, LogRange, read, stream_lines, tail_lines
from aipaas.store import TaskRecord

BIG = 50 * 1024 * 1024


def record(name: str, path: Path) -> TaskRecord:
    return TaskRecord("uid", "acme", "job", name, "w", 0, 0, log_path=str(path))


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 50 MB log of numbered lines."""
    path = tmp_path_factory.mktemp("logs") / "big.log"
    line_count = 0
    with path.open("wb") as handle:
        block = b"".join(b"line %08d %s\n" % (i, b"x" * 80) for i in range(10_000))
        while handle.tell() < BIG:
            handle.write(block.replace(b"line 0000", b"line %04d" % (line_count // 10_000)))
            line_count += 10_000
    return path


def test_tail_of_a_50_mb_file_reads_only_its_end(big_log: Path) -> None:
    tracemalloc.start()
    try:
        lines = tail_lines(str(big_log), 100, max_bytes=8 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(lines) == 100
    with big_log.open("rb") as handle:
        handle.seek(-200 * 100, os.SEEK_END)
        expected = handle.read().split(b"\n")[-101:-1]
    assert lines == expected
    assert peak < 1 << 20, f"peak {peak} bytes for a tail of 100 lines"


def test_streaming_a_50_mb_file_holds_one_block(big_log: Path) -> None:
    tracemalloc.start()
    try:
        size = sum(len(line) + 1 for line in stream_lines(str(big_log)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size == big_log.stat().st_size
    assert peak < 2 << 20, f"peak {peak} bytes streaming {size} bytes"


def test_an_answer_stops_at_its_byte_limit(big_log: Path) -> None:
    tracemalloc.start()
    try:
        sent = sum(len(chunk) for chunk in read([record("w-0", big_log)], LogRange(100_000)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sent == 100_000  # the last line cut short, as Kubernetes does
    assert peak < 2 << 20


def test_tail_of_each_task_prefixed(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"".join(b"a%d\n" % i for i in range(10)))
    b.write_bytes(b"b0\nb1\nno newline at the end")
    out = b"".join(read([record("w-0", a), record("w-1", b)], LogRange(1 << 20, tail=2)))
    assert out == b"w-0 | a8\nw-0 | a9\nw-1 | b1\nw-1 | no newline at the end\n"


@pytest.mark.parametrize("count", [0, 1, 3, 50])
def test_tail_counts_on_small_files(tmp_path: Path, count: int) -> None:
    path = tmp_path / "x.log"
    lines = [b"l%d" % i for i in range(7)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    expected = lines[-count:] if count else []
    assert tail_lines(str(path), count, 1 << 20) == expected
    # Up to byte 6 ("l0\nl1\n"): the file as it was when a follower started.
    assert tail_lines(str(path), count, 1 << 20, end=6) == (
        [b"l0", b"l1"][-count:] if count else []
    )


def test_tail_across_block_boundaries(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    lines = [b"%06d" % i + b"y" * (i % 300) for i in range(5000)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert tail_lines(str(path), 1234, 1 << 30) == lines[-1234:]


def test_a_tail_is_bounded_by_bytes_not_only_lines(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(b"".join(b"%05d%s\n" % (i, b"z" * 994) for i in range(1000)))  # 1000 B each
    lines = tail_lines(str(path), 1000, max_bytes=10_000)
    # The newest lines that fit in max_bytes, never the whole file.
    assert len(lines) == 10
    assert [line[:5] for line in lines] == [b"%05d" % i for i in range(990, 1000)]


def test_a_huge_line_goes_out_in_pieces(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(b"q" * (MAX_LINE * 2 + 10) + b"\nshort\n")
    pieces = list(stream_lines(str(path)))
    assert [len(p) for p in pieces] == [MAX_LINE, MAX_LINE, 10, 5]
    assert [len(p) for p in tail_lines(str(path), 2, 1 << 30)] == [MAX_LINE, MAX_LINE, 10, 5]


def test_since_chooses_the_tasks_written_in_the_window(tmp_path: Path) -> None:
    old, new = tmp_path / "old.log", tmp_path / "new.log"
    old.write_bytes(b"old\n")
    new.write_bytes(b"new\n")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    since = datetime.now(UTC) - timedelta(minutes=10)
    out = b"".join(read([record("w-0", old), record("w-1", new)], LogRange(1 << 20, since=since)))
    assert out == b"w-1 | new\n"


def test_missing_files_and_records_without_logs_give_nothing(tmp_path: Path) -> None:
    gone = record("w-0", tmp_path / "gone.log")
    none = TaskRecord("uid", "acme", "job", "w-1", "w", 1, 1)
    assert list(read([gone, none], LogRange(1 << 20))) == []
    assert tail_lines(str(tmp_path / "gone.log"), 5, 100) == []


def test_an_answer_goes_in_blocks_not_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(50_000)))
    chunks = list(read([record("w-0", path)], LogRange(1 << 30)))
    total = sum(len(c) for c in chunks)
    assert total == path.stat().st_size + 50_000 * len(b"w-0 | ")
    assert len(chunks) <= total // CHUNK + 1
    assert b"".join(chunks).splitlines()[-1] == b"w-0 | line 49999"
