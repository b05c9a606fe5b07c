"""The entry point's load meter: time-averaged requests in flight, request rate, one sample
per server process in the service's ServiceLoad object."""

from __future__ import annotations

from pathlib import Path

import pytest

from aipaas.api.service import LoadSample, ServiceLoad
from aipaas.server.entry_load import LoadMeter
from aipaas.store import Store


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")


def test_concurrency_is_averaged_over_the_interval_and_idle_services_go_quiet(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ticks = Ticks()
    monkeypatch.setattr("aipaas.server.entry_load.time.monotonic", ticks)
    meter = LoadMeter(store)
    meter._ensure_writer = lambda: None  # type: ignore[method-assign]  # no event loop here
    key = ("acme", "echo")
    meter._last_write = ticks.now
    meter.began(key)  # one request for the whole second, another for half of it
    meter.began(key)
    ticks.now += 0.5
    meter.ended(key)
    ticks.now += 0.5
    first = meter._take_samples()[key]
    assert first.concurrency == pytest.approx(1.5)
    assert first.rate == pytest.approx(1.0)
    assert first.in_flight == 1
    ticks.now += 1.0
    meter.ended(key)
    second = meter._take_samples()[key]
    assert second.concurrency == pytest.approx(1.0)
    ticks.now += 1.0
    third = meter._take_samples()[key]  # busy before: one sample of zeros says it stopped
    assert (third.concurrency, third.rate, third.in_flight) == (0.0, 0.0, 0)
    ticks.now += 1.0
    assert meter._take_samples() == {}


def test_each_process_writes_its_own_sample_and_old_ones_are_dropped(store: Store) -> None:
    one, two = LoadMeter(store), LoadMeter(store)
    one._write({("acme", "echo"): LoadSample(at=1000.0, concurrency=2.0)})
    two._write({("acme", "echo"): LoadSample(at=1001.0, concurrency=3.0)})
    found = store.get("ServiceLoad", "acme", "echo")
    assert isinstance(found, ServiceLoad) and found.status is not None
    assert {p: s.concurrency for p, s in found.status.samples.items()} == {
        one.process: 2.0,
        two.process: 3.0,
    }
    two._write({("acme", "echo"): LoadSample(at=1100.0, concurrency=1.0)})
    found = store.get("ServiceLoad", "acme", "echo")
    assert isinstance(found, ServiceLoad) and found.status is not None
    assert list(found.status.samples) == [two.process]  # one's sample is a minute old


def test_a_request_waiting_for_a_replica_is_in_the_sample_until_it_is_sent(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ticks = Ticks()
    monkeypatch.setattr("aipaas.server.entry_load.time.monotonic", ticks)
    meter = LoadMeter(store)
    meter._ensure_writer = lambda: None  # type: ignore[method-assign]  # no event loop here
    key = ("acme", "cold")
    meter._last_write = ticks.now
    meter.began(key)
    meter.wait_began(key)  # no replica ready: it waits (and would wake the writer)
    ticks.now += 0.5
    waiting = meter._take_samples()[key]
    assert (waiting.waiting, waiting.in_flight, waiting.rate) == (1, 1, 0.0)
    assert waiting.concurrency == pytest.approx(1.0)
    meter.wait_ended(key)  # a replica is ready: sent
    ticks.now += 0.5
    assert meter._take_samples()[key].waiting == 0
    meter.ended(key)
    meter.wait_ended(key)  # a second end changes nothing
    assert meter.waiting(key) == 0
