"""Fencing on Kubernetes (backends/kubernetes/fencing.py) against the real kube-apiserver, as
the user aipaas: a controller whose lease was taken over starts nothing once its successor has,
though each runs a backend object of its own, and raising the mark at once from many
controllers leaves the highest token."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from aipaas.backends.base import FencingRefused, LaunchRequest
from aipaas.backends.kubernetes.fencing import FENCE_NAME, FRESH_SECONDS, ClusterFence
from aipaas.backends.kubernetes.manifests import REQUEST_LABEL, request_hash
from tests.kube.kube_backend import make_backend
from tests.kube.kube_cluster import Cluster


def _request(rid: str, token: int | None, tmp: Path) -> LaunchRequest:
    return LaunchRequest(
        request_id=rid,
        task="w-0",
        job=rid.split(".", 1)[0],
        tenant="acme",
        node="gpu-a",
        command=("sleep", "60"),
        env={},
        working_dir=None,
        gpus=(),
        gpu_milli=0,
        log_path=str(tmp / f"{rid}.log"),
        fencing_token=token,
        cpu_milli=100,
        memory_mib=64,
    )


def _pods(cluster: Cluster, rid: str) -> int:
    return len(
        cluster.admin.list("Pod", namespace="acme", labels={REQUEST_LABEL: request_hash(rid)})
    )


def test_a_taken_over_controller_starts_nothing_after_its_successor_did(
    cluster: Cluster, tmp_path: Path
) -> None:
    old = make_backend(cluster, tmp_path)
    new = make_backend(cluster, tmp_path)
    try:
        old.start(_request("before.1", 1, tmp_path))
        new.start(_request("after.1", 2, tmp_path))
        # the old controller was paused past a read's freshness (its clock went on)
        time.sleep(FRESH_SECONDS + 0.1)
        with pytest.raises(
            FencingRefused, match="carries token 1, but this cluster has seen token 2"
        ):
            old.start(_request("stale.1", 1, tmp_path))
        assert _pods(cluster, "stale.1") == 0
        assert _pods(cluster, "before.1") == 1 and _pods(cluster, "after.1") == 1
        stored = cluster.admin.get("ConfigMap", FENCE_NAME, "default")
        assert stored is not None and stored["data"] == {"token": "2"}
    finally:
        old.close()
        new.close()


def test_controllers_raising_the_mark_at_once_leave_the_highest(
    cluster: Cluster, tmp_path: Path
) -> None:
    backends = [make_backend(cluster, tmp_path) for _ in range(6)]
    errors: list[BaseException] = []

    def admit(fence: ClusterFence, token: int) -> None:
        try:
            fence.admit(token, f"task-{token}")
        except FencingRefused:
            pass  # a lower token that came after a higher one: refused, as it should be
        except BaseException as err:  # anything else fails the test below
            errors.append(err)

    threads = [
        threading.Thread(target=admit, args=(b.fence, token))
        for token, b in enumerate(backends, start=3)
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == []
        stored = cluster.admin.get("ConfigMap", FENCE_NAME, "default")
        assert stored is not None and stored["data"] == {"token": "8"}
        time.sleep(FRESH_SECONDS + 0.1)  # past what each had read or written itself
        for b in backends[:-1]:
            with pytest.raises(FencingRefused):
                b.fence.admit(7, "late")
    finally:
        for b in backends:
            b.close()


def test_a_start_without_a_token_passes_only_where_no_lease_ever_started(
    cluster: Cluster, tmp_path: Path
) -> None:
    backend = make_backend(cluster, tmp_path)
    try:
        backend.start(_request("untokened.1", None, tmp_path))
        assert cluster.admin.get("ConfigMap", FENCE_NAME, "default") is None  # nothing written
        backend.start(_request("leased.1", 1, tmp_path))
        with pytest.raises(FencingRefused, match="carries no token"):
            backend.start(_request("untokened.2", None, tmp_path))
        assert _pods(cluster, "untokened.2") == 0
    finally:
        backend.close()
