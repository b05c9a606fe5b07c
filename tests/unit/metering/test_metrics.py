"""Metrics set whole each cycle: a drained queue reads 0, and the text is what a scrape gets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aipaas.metering.metrics import MULTIPROCESS_ENV, Metrics, prepare_multiprocess


def _pending(text: str) -> dict[str, float]:
    prefix = "aipaas_queue_pending_jobs{"
    return {
        line.split("{", 1)[1].split("}", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def test_pending_per_queue_is_counted_and_a_drained_queue_reads_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(MULTIPROCESS_ENV, raising=False)
    metrics = Metrics()
    metrics.set_pending([("acme", "a"), ("acme", "a"), ("acme", "b")])
    assert _pending(metrics.exposition().decode()) == {
        'queue="a",tenant="acme"': 2.0,
        'queue="b",tenant="acme"': 1.0,
    }
    metrics.set_pending([("acme", "b")])
    assert _pending(metrics.exposition().decode()) == {
        'queue="a",tenant="acme"': 0.0,
        'queue="b",tenant="acme"': 1.0,
    }


def test_preparing_workers_empties_the_directory_and_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Recorded so that the variable prepare_multiprocess sets is gone after the test.
    monkeypatch.setenv(MULTIPROCESS_ENV, "before")
    monkeypatch.delenv(MULTIPROCESS_ENV)
    directory = tmp_path / "metrics"
    directory.mkdir()
    (directory / "gauge_mostrecent_123.db").write_bytes(b"stale")
    (directory / "keep.txt").write_text("not ours")
    prepare_multiprocess(directory)
    assert sorted(p.name for p in directory.iterdir()) == ["keep.txt"]
    assert os.environ[MULTIPROCESS_ENV] == str(directory)


def test_no_test_leaves_the_multiprocess_directory_set() -> None:
    assert MULTIPROCESS_ENV not in os.environ
