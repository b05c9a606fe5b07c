"""An http(s) dataset source against a real local HTTP server (Python's http.server): a
directory URL lists the files its index page links (and its subdirectories'), never caches
the page itself; a file URL is one file; a directory that links nothing is refused naming
spec.source; sort links, "." and ".." links and links elsewhere are no files, and a page that
links itself is read once."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from aipaas.data.cache import NodeCache
from aipaas.data.copier import fill
from aipaas.data.source import SourceError, SourceSpec, list_files

# An Apache-style index page: sort links, itself, its parent, another host, a fragment, and
# two real entries (a file and a subdirectory); served at /odd/ (the rest is the file tree).
ODD_INDEX = b"""<html><body>
<a href="?C=N;O=D">Name</a> <a href="?C=M;O=A">Last modified</a>
<a href="./">this</a> <a href="../">Parent Directory</a> <a href="/">root</a>
<a href="http://elsewhere.invalid/odd/x.bin">elsewhere</a> <a href="#top">top</a>
<a href="real.bin">real.bin</a> <a href="more/">more/</a>
</body></html>"""
LOOP_PAGE = b'<html><a href="./more/">again</a> <a href="deep.txt">deep</a></html>'


class Handler(SimpleHTTPRequestHandler):
    """Files of a directory, plus the crafted index pages above."""

    def do_GET(self) -> None:
        pages = {"/odd/": ODD_INDEX, "/odd/more/": LOOP_PAGE}
        if self.path in pages:
            body = pages[self.path]
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def do_HEAD(self) -> None:
        if self.path in ("/odd/", "/odd/more/"):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            return
        super().do_HEAD()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("site")
    data = root / "data"
    (data / "sub" / "deeper").mkdir(parents=True)
    (data / "a.bin").write_bytes(os.urandom(5000))
    (data / "sub" / "b.txt").write_text("bee\n")
    (data / "sub" / "deeper" / "c.csv").write_text("x,y\n1,2\n")
    (data / "with space.txt").write_text("spaced\n")
    (root / "empty").mkdir()
    (root / "odd").mkdir()
    (root / "odd" / "real.bin").write_bytes(b"r" * 123)
    (root / "odd" / "more").mkdir()
    (root / "odd" / "more" / "deep.txt").write_text("deep\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


EXPECTED = ["a.bin", "sub/b.txt", "sub/deeper/c.csv", "with space.txt"]


@pytest.mark.parametrize("suffix", ["/data/", "/data"], ids=["slash", "no slash"])
def test_a_directory_url_lists_the_files_its_index_links(
    site: tuple[str, Path], suffix: str
) -> None:
    url, root = site
    files = list_files(SourceSpec(url + suffix))
    assert [f.relative for f in files] == EXPECTED
    for file in files:
        assert file.size == (root / "data" / file.relative).stat().st_size, file


def test_a_directory_is_cached_as_its_files_not_its_page(
    site: tuple[str, Path], tmp_path: Path
) -> None:
    url, root = site
    cache = NodeCache(tmp_path / "cache", 1 << 30)
    entry = cache.entry("acme/web-1")
    entry.path.mkdir(parents=True)
    with entry.locked():
        result = fill(entry, SourceSpec(url + "/data/"))
    assert result.files == 4
    cached = sorted(str(p.relative_to(entry.data)) for p in entry.data.rglob("*") if p.is_file())
    assert cached == EXPECTED
    for relative in EXPECTED:
        assert (entry.data / relative).read_bytes() == (root / "data" / relative).read_bytes()
    assert result.size_bytes == sum((root / "data" / r).stat().st_size for r in EXPECTED)


def test_sub_paths_and_include_patterns_apply_to_http(site: tuple[str, Path]) -> None:
    url, _root = site
    sub = list_files(SourceSpec(url + "/data/", sub_paths=("sub",)))
    assert [f.relative for f in sub] == ["sub/b.txt", "sub/deeper/c.csv"]
    csv = list_files(SourceSpec(url + "/data/", include=("*.csv",)))
    assert [f.relative for f in csv] == ["sub/deeper/c.csv"]


def test_a_file_url_is_one_file(site: tuple[str, Path]) -> None:
    url, root = site
    (file,) = list_files(SourceSpec(url + "/data/a.bin"))
    assert file.relative == "a.bin" and file.size == 5000
    assert file.path == url + "/data/a.bin"
    assert (root / "data" / "a.bin").stat().st_size == file.size


def test_a_directory_linking_no_file_is_refused_naming_the_field(site: tuple[str, Path]) -> None:
    url, _root = site
    with pytest.raises(SourceError, match=r"spec\.source .*/empty/: a directory whose index"):
        list_files(SourceSpec(url + "/empty/"))
    with pytest.raises(SourceError, match=r"spec\.source .*/missing/: not found"):
        list_files(SourceSpec(url + "/missing/"))


def test_sort_links_parents_other_hosts_and_loops_are_no_files(site: tuple[str, Path]) -> None:
    url, _root = site
    files = list_files(SourceSpec(url + "/odd/"))
    assert [(f.relative, f.size) for f in files] == [("more/deep.txt", 5), ("real.bin", 123)]
    assert all(f.path.startswith(url + "/odd/") for f in files)
