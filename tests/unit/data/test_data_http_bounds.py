"""A source's listing is bounded: an http(s) index page whose body never ends is cut off at
the page's time, a site whose pages never end stops at the page bound, and any protocol's
listing stops at its total time, each naming spec.source."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from aipaas.data import http_listing
from aipaas.data.source import SourceError, SourceSpec, list_files


class EndlessSite:
    """Loopback: ``/bottomless/`` answers an HTML page that never ends (a link every 0.1 s);
    any other path ending in "/" links two new subdirectories."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            try:
                request = connection.recv(65536).decode(errors="replace")
                path = request.split(" ")[1] if " " in request else "/"
                head = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                if path.startswith("/bottomless/"):
                    connection.sendall(f"{head}Connection: close\r\n\r\n<html>".encode())
                    index = 0
                    while not self.stop.wait(0.1):
                        connection.sendall(f'<a href="f{index}.bin">f</a>'.encode())
                        index += 1
                    return
                body = b'<html><a href="a/">a</a> <a href="b/">b</a></html>'
                length = f"Content-Length: {len(body)}\r\n\r\n"
                connection.sendall((head + length).encode() + (body if "GET" in request else b""))
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.fixture
def site() -> Iterator[EndlessSite]:
    made = EndlessSite()
    yield made
    made.close()


def test_an_index_page_that_never_ends_is_cut_off(
    site: EndlessSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_listing, "PAGE_SECONDS", 2.0)
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"spec.source .*bottomless"):
        list_files(SourceSpec(f"{site.url}/bottomless/"))
    assert time.monotonic() - started < 10


def test_index_pages_without_end_stop_at_the_page_bound(
    site: EndlessSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_listing, "MAX_PAGES", 50)
    with pytest.raises(SourceError, match=r"spec.source .*more than 50 index pages"):
        list_files(SourceSpec(f"{site.url}/tree/"))


def test_a_listing_stops_at_its_total_time(
    site: EndlessSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_listing, "LIST_SECONDS", 1.0)
    with pytest.raises(SourceError, match=r"spec.source .*(not listed within|cannot read)"):
        list_files(SourceSpec(f"{site.url}/tree/"))


def test_a_listing_of_another_protocol_stops_at_its_total_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A generated tree behind any protocol (a WebHDFS or FTP server whose directories never
    end): the listing is given up at its total time, naming spec.source."""
    from fsspec.implementations.memory import MemoryFileSystem

    def endless_find(self: MemoryFileSystem, path: str, **kwargs: object) -> dict[str, object]:
        time.sleep(30)
        return {}

    monkeypatch.setattr(MemoryFileSystem, "find", endless_find)
    monkeypatch.setattr(http_listing, "LIST_SECONDS", 1.0)
    MemoryFileSystem().pipe("/tree/a/b.bin", b"x")  # a directory, so the tree is walked
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"spec.source memory://tree: not listed within 1 s"):
        list_files(SourceSpec("memory://tree"))
    assert time.monotonic() - started < 5
