"""A task's log within its cap: the runner's writer (``LogSink``) keeps the head and a rotated
tail, drops output while the disk is short of room, and the server's readers see the output as
one sequence with a line where bytes were dropped."""

from __future__ import annotations

from pathlib import Path

from aipaas.backends.local.runner import LogSink
from aipaas.server.logs import Joined, logical_size, pieces, read_at, stream_lines, tail_lines


def lines(first: int, count: int) -> bytes:
    return b"".join(b"line %06d\n" % index for index in range(first, first + count))


def write_all(sink: LogSink, data: bytes, step: int = 37) -> None:
    for at in range(0, len(data), step):
        sink.write(data[at : at + step])


def test_the_log_keeps_its_head_and_a_rotated_tail_and_says_what_was_dropped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w-0.log"
    sink = LogSink(str(path), head=1200, segment=600, min_free=0)
    output = lines(0, 1000)  # 12,000 bytes, 12 a line
    write_all(sink, output)
    sink.close()
    assert path.stat().st_size == 1200
    tail_files = sorted((tmp_path / "w-0.log.tail").iterdir())
    assert len(tail_files) == 2  # the two newest segments only
    kept = sum(f.stat().st_size for f in tail_files)
    assert kept <= 1200
    assert logical_size(str(path)) == len(output)
    whole = b"\n".join(stream_lines(str(path))) + b"\n"
    dropped = len(output) - 1200 - kept
    assert f"[aipaas: {dropped} bytes of this task's output were dropped here".encode() in whole
    assert whole.startswith(lines(0, 100))  # the head, whole lines
    assert whole.endswith(output[-kept:])  # the tail, up to the last byte
    assert tail_lines(str(path), 3, 1 << 20) == [b"line 000997", b"line 000998", b"line 000999"]


def test_a_follower_reading_by_offsets_gets_a_note_where_its_bytes_were_rotated_away(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w-0.log"
    sink = LogSink(str(path), head=120, segment=120, min_free=0)
    write_all(sink, lines(0, 10))  # the head exactly
    data, offset = read_at(str(path), 0, 1 << 20)
    assert data == lines(0, 10) and offset == 120
    write_all(sink, lines(10, 100))  # ten segments: the first eight rotated away
    sink.close()
    note, after = read_at(str(path), offset, 1 << 20)
    assert note == (
        b"[aipaas: 960 bytes of this task's output were dropped here: its log keeps the"
        b" beginning and a rotated end, and writes nothing while the log disk is nearly full]\n"
    )
    rest = b""
    while after < logical_size(str(path)):
        data, after = read_at(str(path), after, 50)
        rest += data
    assert rest == lines(90, 20)


def test_output_is_dropped_not_written_while_the_disk_is_short_of_room(tmp_path: Path) -> None:
    path = tmp_path / "w-0.log"
    sink = LogSink(str(path), head=1 << 20, segment=1 << 20, min_free=1 << 62)
    write_all(sink, lines(0, 100))
    sink.close()
    assert path.stat().st_size == 0 and sink.dropped == 1200
    # An empty piece at the output's end: readers see what is missing before it.
    assert [(p.start, p.size) for p in pieces(str(path))] == [(0, 0), (1200, 0)]
    assert logical_size(str(path)) == 1200
    assert Joined(str(path)).read(0, 1 << 20) == (
        b"[aipaas: 1200 bytes of this task's output were dropped here: its log keeps the"
        b" beginning and a rotated end, and writes nothing while the log disk is nearly full]\n"
    )


def test_output_after_room_came_back_follows_a_note(tmp_path: Path) -> None:
    path = tmp_path / "w-0.log"
    sink = LogSink(str(path), head=1 << 20, segment=1 << 20, min_free=0)
    write_all(sink, lines(0, 5))
    sink.min_free = 1 << 62  # the disk fills
    write_all(sink, lines(5, 10))
    sink.min_free = 0  # and has room again
    write_all(sink, lines(15, 5))
    sink.close()
    whole = b"\n".join(stream_lines(str(path))) + b"\n"
    assert whole == (
        lines(0, 5)
        + b"[aipaas: 120 bytes of this task's output were dropped here: its log keeps the"
        b" beginning and a rotated end, and writes nothing while the log disk is nearly full]\n"
        + lines(15, 5)
    )


def test_a_segment_rotated_away_during_a_read_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "w-0.log"
    sink = LogSink(str(path), head=120, segment=120, min_free=0)
    write_all(sink, lines(0, 30))  # the head and two segments of ten lines
    joined = Joined(str(path))
    expected = lines(0, 30)
    write_all(sink, lines(30, 20))  # two more: the first two segments are deleted
    sink.close()
    try:
        assert joined.read(0, 1 << 20) == expected
    finally:
        joined.close()


def test_lines_the_runner_writes_to_the_log_file_itself_keep_the_offsets(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w-0.log"
    sink = LogSink(str(path), head=120, segment=120, min_free=0)
    write_all(sink, lines(0, 5))
    with path.open("ab") as runner_stderr:  # while the head is open: counted as output
        runner_stderr.write(b"aipaas: a note\n")
    write_all(sink, lines(5, 20))
    with path.open("ab") as runner_stderr:  # after the head closed: beyond its end, not read
        runner_stderr.write(b"aipaas: a late note\n")
    sink.close()
    output = lines(0, 5) + b"aipaas: a note\n" + lines(5, 20)
    assert logical_size(str(path)) == len(output)
    whole = b"\n".join(stream_lines(str(path))) + b"\n"
    assert whole == output
