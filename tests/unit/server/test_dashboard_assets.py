"""Every file of the dashboard ships with the package (pyproject's package-data), and the page
refers only to files that exist: a new asset of a kind the globs miss would 404 once installed."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from aipaas.server.dashboard_routes import ASSETS

ROOT = Path(__file__).resolve().parents[3]


def package_globs() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs: list[str] = config["tool"]["setuptools"]["package-data"]["aipaas"]
    return globs


def test_every_dashboard_file_matches_a_package_data_glob() -> None:
    package = ASSETS.parents[2]  # src/aipaas
    files = [p for p in ASSETS.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert files
    for path in files:
        relative = path.relative_to(package).as_posix()
        assert any(matches(relative, glob) for glob in package_globs()), relative


def matches(path: str, glob: str) -> bool:
    """A setuptools package-data glob: ``**/`` any directories (or none), ``*`` within one."""
    pattern = re.escape(glob).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*")
    return re.fullmatch(pattern, path) is not None


def test_the_glob_reading_is_setuptools_reading() -> None:
    assert matches("server/static/dashboard/js/pages/jobs.js", "**/*.js")
    assert matches("x.css", "**/*.css")
    assert not matches("server/static/logo.svg", "**/*.js")


def test_the_page_and_its_modules_name_only_files_that_exist() -> None:
    texts = [ASSETS / "index.html", *ASSETS.rglob("*.js")]
    for source in texts:
        text = source.read_text()
        for url in re.findall(r'(?:src|href)="(/dashboard/assets/[^"]+)"', text):
            assert (ASSETS / url.removeprefix("/dashboard/assets/")).is_file(), (source, url)
        for module in re.findall(r'from "(\.[^"]+)"', text):
            assert (source.parent / module).resolve().is_file(), (source, module)
        # No address off the server: every asset is the package's.
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), source
