"""The local backend's exec probe of a replica in an image runs inside its container (podman
exec), not on the host: a file only the image has is there, one only the host has is not."""

from __future__ import annotations

import time
from pathlib import Path

from aipaas.backends.base import LaunchRequest
from aipaas.backends.local.backend import LocalBackend
from tests.integration.task_images import IMAGE, build_image, skip_unless_available

pytestmark = skip_unless_available()


def test_an_exec_probe_of_a_task_in_an_image_runs_in_its_container(tmp_path: Path) -> None:
    build_image()
    backend = LocalBackend(tmp_path / "run", cpu_milli=2000, memory_mib=2048, gpus=[])
    request = LaunchRequest(
        request_id="uid.probe-0.a0",
        task="probe-0",
        job="probe",
        tenant="acme",
        node=backend.name_of_node,
        command=("sleep", "60"),
        env={},
        working_dir=None,
        gpus=(),
        gpu_milli=0,
        log_path=str(tmp_path / "logs" / "probe-0.log"),
        grace_seconds=1,
        image=IMAGE,
    )
    backend.start(request)
    try:
        deadline = time.monotonic() + 30
        while backend.probe_exec(request.request_id, ["ls", "/bin/busybox"], 5) is not None:
            assert time.monotonic() < deadline, "the container never answered"
            time.sleep(0.3)
        missing = backend.probe_exec(request.request_id, ["ls", "/usr/bin/python3"], 5)
        assert missing is not None and missing.startswith("ls exited with code"), missing
    finally:
        backend.stop(request.request_id, 1)
    deadline = time.monotonic() + 30
    while backend.status([request.request_id])[request.request_id].state.value == "Running":
        assert time.monotonic() < deadline, "the task never ended"
        time.sleep(0.3)
