"""A task with an image on the Ray backend is refused at once, for good: it fails (not lost,
so no new attempt is made to be refused again) and its status says why in one line."""

from __future__ import annotations

from pathlib import Path

from aipaas.backends.base import LaunchRequest, TaskState
from aipaas.backends.ray.driver import IMAGE_REFUSAL, RayDriver


def test_a_task_with_an_image_fails_saying_ray_runs_no_images(tmp_path: Path) -> None:
    driver = RayDriver(tmp_path / "ray")  # no cluster is reached: the refusal comes first
    request = LaunchRequest(
        request_id="uid.worker-0.a0",
        task="worker-0",
        job="train",
        tenant="acme",
        node="ray-node-1",
        command=("python3", "train.py"),
        env={},
        working_dir=None,
        gpus=(),
        gpu_milli=0,
        log_path="",
        image="localhost/train:1",
    )
    driver.start(request)
    driver.start(request)  # asked again: the same answer, nothing submitted
    status = driver.status([request.request_id])[request.request_id]
    assert status.state == TaskState.FAILED
    assert status.message == f"not started: {IMAGE_REFUSAL}"
    assert status.message.count("\n") == 0
