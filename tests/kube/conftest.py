"""Fixtures of the Kubernetes tests: a fake API server with two GPU nodes publishing DRA
ResourceSlices (as NVIDIA's DRA driver does), the backend talking to it through a kubeconfig,
and the controller world of tests/unit/controller."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "controller"))

from ctl_world import World, world
from kube_backend import make_backend
from kube_fake import FakeKube
from kube_objects import gpu_node, gpu_slice, namespace

from aipaas.backends.kubernetes.backend import KubernetesBackend

__all__ = ["World", "backend", "fake", "world"]
NODES = ("gpu-a", "gpu-b")


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeKube]:
    with FakeKube() as server:
        server.put(namespace("acme"))
        for node in NODES:
            server.put(gpu_node(node, rack="r1" if node == "gpu-a" else "r2"))
            server.put(gpu_slice(node, 4))
        yield server
        assert server.rejected == [], "the backend wrote objects the schemas refuse"


@pytest.fixture
def backend(fake: FakeKube, tmp_path: Path) -> Iterator[KubernetesBackend]:
    made = make_backend(fake, tmp_path)
    yield made
    made.close()
