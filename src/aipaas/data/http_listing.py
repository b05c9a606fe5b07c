"""An http(s) dataset source: one file, or a directory read from its index page.

fsspec's HTTPFileSystem calls every URL a file (``isfile`` is "it answers"), so a directory's
URL used to be copied as one file: the HTML of its index page. Here a URL is a directory when
its path ends with "/" or it answers an HTML page; its files are the links of that page under
it (fsspec's ``ls`` keeps only those), and the links ending in "/" are its subdirectories, read
the same way. Links with a query or a fragment (an index page's sort links), "." and ".." are
no files; every page is read once (a page linking itself is no loop). A directory whose pages
link no file is refused, naming spec.source: an empty dataset is a mistake, not a cache.

A generated site's pages may never end (each linking new subdirectories): the listing stops,
naming spec.source, past ``MAX_PAGES`` pages, ``MAX_LINKS`` links or ``LIST_SECONDS`` seconds
in all, each page within ``PAGE_SECONDS`` (a page whose body never ends is cut off there).
Called by data/source.py ``list_files``.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

import fsspec

#: index pages followed below the source (a guard against endless generated pages)
MAX_DEPTH = 32
#: files one source may list
MAX_FILES = 100_000
#: index pages one listing may read
MAX_PAGES = 10_000
#: links (files and directories) one listing may gather from its pages
MAX_LINKS = 1_000_000
#: seconds one listing may take, its pages and the files' sizes
LIST_SECONDS = 900.0
#: seconds one index page may take (it is read whole: a page without end is cut off here)
PAGE_SECONDS = 60.0
HTML_TYPES = ("text/html", "application/xhtml+xml")


class HttpListingError(Exception):
    """The http(s) source cannot be read as files (its message names spec.source)."""


def is_http(protocol: str) -> bool:
    return protocol in ("http", "https")


def http_entries(fs: fsspec.AbstractFileSystem, url: str) -> dict[str, dict[str, Any]]:
    """URL -> fsspec info (with its size) of every file the source names: the URL itself when
    it is a file, or the files its index pages link below it."""
    fs.invalidate_cache()  # an instance may outlive a listing: never serve an old one
    try:
        info: dict[str, Any] = fs.info(url, timeout=LIST_SECONDS)
    except FileNotFoundError as err:
        raise HttpListingError(f"spec.source {url}: not found") from err
    if not _is_index(url, info):
        return {url: info}
    deadline = time.monotonic() + LIST_SECONDS
    files = _walk(fs, url, deadline)
    if not files:
        raise HttpListingError(
            f"spec.source {url}: a directory whose index page links no file under it "
            "(an http(s) directory is read from the links of its index page)"
        )
    return {
        name: _sized(fs, name, found, _left(url, deadline)) for name, found in sorted(files.items())
    }


def _left(url: str, deadline: float) -> float:
    """Seconds left to the listing; HttpListingError once none are."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise HttpListingError(f"spec.source {url}: not listed within {LIST_SECONDS:g} s")
    return left


def _is_index(url: str, info: dict[str, Any]) -> bool:
    if urlsplit(url).path.endswith("/"):
        return True
    mimetype = str(info.get("mimetype") or "").partition(";")[0].strip().lower()
    return mimetype in HTML_TYPES


def _walk(fs: fsspec.AbstractFileSystem, url: str, deadline: float) -> dict[str, dict[str, Any]]:
    files: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    pending = [(url.rstrip("/") + "/", 0)]
    links = 0
    while pending:
        page, depth = pending.pop()
        if page in seen:
            continue
        seen.add(page)
        if len(seen) > MAX_PAGES:
            raise HttpListingError(
                f"spec.source {url}: more than {MAX_PAGES} index pages (a listing without end?)"
            )
        try:
            # fsspec's sync wrapper stops waiting at ``timeout`` (FSTimeoutError, an OSError)
            timeout = min(PAGE_SECONDS, _left(url, deadline))
            entries = fs.ls(page, detail=True, timeout=timeout)
        except (OSError, ValueError) as err:
            message = f"spec.source {url}: cannot read the index {page}: {err}"
            raise HttpListingError(message) from err
        links += len(entries)
        if links > MAX_LINKS:
            raise HttpListingError(f"spec.source {url}: index pages link more than {MAX_LINKS}")
        for entry in entries:
            name = str(entry["name"])
            if not _a_path_below(name, page):
                continue
            if entry.get("type") == "directory":
                if depth + 1 < MAX_DEPTH:
                    pending.append((name, depth + 1))
                continue
            files[name] = dict(entry)
            if len(files) > MAX_FILES:
                raise HttpListingError(f"spec.source {url}: more than {MAX_FILES} files")
    return files


def _a_path_below(name: str, page: str) -> bool:
    """A link to a file or directory below the page: no query, no fragment, no "." or ".."
    step (fsspec already dropped the links that leave the page's URL)."""
    if not name.startswith(page) or name == page:
        return False
    rest = name[len(page) :]
    if "?" in rest or "#" in rest:
        return False
    steps = rest.rstrip("/").split("/")
    return all(step not in ("", ".", "..") for step in steps)


def _sized(
    fs: fsspec.AbstractFileSystem, name: str, entry: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """An index page says no sizes: the file's own answer does (HEAD, else GET's headers)."""
    if entry.get("size") is not None:
        return entry
    try:
        return {**entry, **fs.info(name, timeout=timeout), "type": "file"}
    except FileNotFoundError as err:
        raise HttpListingError(f"spec.source: {name} is linked but not found") from err
