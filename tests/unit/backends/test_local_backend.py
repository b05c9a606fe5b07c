"""The local backend runs real processes: environment, logs, exit codes, idempotent start,
stop, and finding its tasks again from a new backend instance (a restarted server)."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import pytest

from aipaas.api.devices import ResourceSlice
from aipaas.backends.base import ClaimDevice, LaunchRequest, TaskState
from aipaas.backends.local import LocalBackend
from aipaas.backends.local.machine import Gpu, gpus_of, short_model
from aipaas.backends.local.nvml import publish_slice, visible_devices


def request(tmp: Path, rid: str, command: list[str], **env: str) -> LaunchRequest:
    return LaunchRequest(
        request_id=rid,
        task="worker-0",
        job="j",
        tenant="acme",
        node="here",
        command=tuple(command),
        env=env,
        working_dir=None,
        gpus=(1,),
        gpu_milli=1000,
        log_path=str(tmp / "logs" / f"{rid}.log"),
    )


def assert_reaches_state(
    backend: LocalBackend, rid: str, state: TaskState, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if backend.status([rid])[rid].state is state:
            return
        time.sleep(0.05)
    raise AssertionError(f"{rid} never reached {state}: {backend.status([rid])[rid]}")


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(
        tmp_path / "run",
        node_name="here",
        cpu_milli=4000,
        memory_mib=1024,
        gpus=[],
        environ={"PATH": os.environ["PATH"], "SECRET": "x"},
    )


class TestLocalBackend:
    def test_inventory_without_gpus(self, backend: LocalBackend) -> None:
        node = backend.inventory().nodes[0]
        assert (node.name, node.cpu_milli, node.gpu_count) == ("here", 4000, 0)

    def test_inventory_with_gpus(self, tmp_path: Path) -> None:
        gpus = [Gpu(0, "H100", 81559), Gpu(1, "H100", 81559)]
        node = LocalBackend(tmp_path, gpus=gpus).inventory().nodes[0]
        assert (node.gpu_count, node.gpu_model) == (2, "H100")

    @pytest.mark.parametrize(
        ("name", "want"),
        [("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA A100-SXM4-40GB", "A100"), ("Tesla T4", "T4")],
    )
    def test_short_model(self, name: str, want: str) -> None:
        assert short_model(name) == want

    def test_runs_with_env_and_log(self, backend: LocalBackend, tmp_path: Path) -> None:
        script = (
            "import os; print(os.environ['RANK'], os.environ['CUDA_VISIBLE_DEVICES'], "
            "os.environ.get('SECRET'))"
        )
        backend.start(request(tmp_path, "r1", [sys.executable, "-c", script], RANK="3"))
        assert_reaches_state(backend, "r1", TaskState.SUCCEEDED)
        assert (tmp_path / "logs" / "r1.log").read_text() == "3 1 None\n"
        assert backend.status(["r1"])["r1"].exit_code == 0

    def test_exit_code_and_missing_program(self, backend: LocalBackend, tmp_path: Path) -> None:
        backend.start(request(tmp_path, "r2", [sys.executable, "-c", "raise SystemExit(7)"]))
        backend.start(request(tmp_path, "r3", ["/no/such/program"]))
        assert_reaches_state(backend, "r2", TaskState.FAILED)
        assert_reaches_state(backend, "r3", TaskState.FAILED)
        assert backend.status(["r2"])["r2"].exit_code == 7
        assert backend.status(["r3"])["r3"].exit_code == 127
        assert "cannot start" in (tmp_path / "logs" / "r3.log").read_text()

    def test_start_is_idempotent(self, backend: LocalBackend, tmp_path: Path) -> None:
        marker = tmp_path / "count"
        script = f"open({str(marker)!r}, 'a').write('x')"
        for _ in range(3):
            backend.start(request(tmp_path, "r4", [sys.executable, "-c", script]))
        assert_reaches_state(backend, "r4", TaskState.SUCCEEDED)
        assert marker.read_text() == "x"

    def test_stop(self, backend: LocalBackend, tmp_path: Path) -> None:
        backend.start(request(tmp_path, "r5", ["sleep", "30"]))
        assert_reaches_state(backend, "r5", TaskState.RUNNING)
        backend.stop("r5", grace_seconds=2)
        assert_reaches_state(backend, "r5", TaskState.FAILED)
        assert backend.status(["r5"])["r5"].exit_code == 143

    def test_a_new_instance_finds_running_tasks(
        self, backend: LocalBackend, tmp_path: Path
    ) -> None:
        backend.start(request(tmp_path, "r6", ["sleep", "1"]))
        other = LocalBackend(tmp_path / "run", node_name="here", gpus=[])
        assert other.status(["r6", "never"]) == {
            "r6": other.status(["r6"])["r6"],
            "never": other.status(["never"])["never"],
        }
        assert other.status(["r6"])["r6"].state is TaskState.RUNNING
        assert other.status(["never"])["never"].state is TaskState.UNKNOWN
        other.start(request(tmp_path, "r6", ["sleep", "1"]))  # no second process
        assert_reaches_state(other, "r6", TaskState.SUCCEEDED)

    def test_a_killed_runner_is_lost(self, backend: LocalBackend, tmp_path: Path) -> None:
        backend.start(request(tmp_path, "r7", ["sleep", "30"]))
        assert_reaches_state(backend, "r7", TaskState.RUNNING)
        pid = int((tmp_path / "run" / "r7" / "pid").read_text())
        os.killpg(pid, 9)
        assert_reaches_state(backend, "r7", TaskState.LOST)

    def test_bad_request_id(self, backend: LocalBackend, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="invalid request id"):
            backend.start(request(tmp_path, "../x", ["true"]))


def test_a_relative_run_dir_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    backend = LocalBackend(Path("run"), node_name="here", gpus=[])
    backend.start(request(Path("."), "rel", [sys.executable, "-c", "print('ok')"]))
    assert_reaches_state(backend, "rel", TaskState.SUCCEEDED)


class _FakeNvml:
    """Two H100s, as NVML would describe them."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> object:
        return type("Memory", (), {"total": 80 * 2**30})()

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        return (0, 0)

    def __getattr__(self, name: str) -> object:
        def missing(*_args: object) -> object:
            raise self.NVMLError(name)

        return missing


def test_gpus_from_the_published_slice() -> None:
    gpus = gpus_of(publish_slice("here", _FakeNvml()))
    assert gpus == [Gpu(0, "H100", 81920), Gpu(1, "H100", 81920)]


def test_no_gpu_here_means_cpu_only(tmp_path: Path) -> None:
    node = LocalBackend(tmp_path, node_name="here").inventory().nodes[0]
    assert node.gpu_count == 0 or node.gpu_model  # a GPU machine reports its model


@pytest.mark.gpu
def test_a_real_gpu_is_offered_and_given(tmp_path: Path) -> None:
    """On a machine with an NVIDIA GPU: the node offers it and a task sees only its own."""
    gpus = gpus_of(publish_slice("here"))
    if not gpus:
        pytest.skip("no NVIDIA GPU visible through NVML on this machine")
    backend = LocalBackend(tmp_path / "run", node_name="here")
    node = backend.inventory().nodes[0]
    assert node.gpu_count == len(gpus) and node.gpu_model
    last = gpus[-1].index
    script = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"
    task = request(tmp_path, "gpu", [sys.executable, "-c", script])
    backend.start(dataclasses.replace(task, gpus=(last,)))  # the last GPU only
    assert_reaches_state(backend, "gpu", TaskState.SUCCEEDED)
    assert (tmp_path / "logs" / "gpu.log").read_text() == f"{last}\n"


class TestVisibleDevices:
    """CUDA_VISIBLE_DEVICES from a task's claim devices (hand-built slice of NVML's shape)."""

    @staticmethod
    def published() -> ResourceSlice:
        published = publish_slice("here", _FakeNvml())  # gpu-0 (GPU-0), gpu-1 (GPU-1)
        mig = {
            "name": "gpu-1-mig-0",
            "attributes": {
                "type": {"string": "mig"},
                "uuid": {"string": "MIG-1-0"},
                "parentIndex": {"int": 1},
            },
        }
        data = published.model_dump(mode="json", by_alias=True, exclude_none=True)
        data["spec"]["devices"].append(mig)
        return ResourceSlice.model_validate(data)

    def test_claim_devices_decide(self, tmp_path: Path) -> None:
        task = request(tmp_path, "r", ["x"])
        nv = "gpu.nvidia.com"
        one = dataclasses.replace(task, gpus=(), devices=(ClaimDevice(nv, "here", "gpu-1"),))
        assert visible_devices(one, self.published()) == "1"
        mig = dataclasses.replace(
            one, devices=(ClaimDevice(nv, "here", "gpu-0"), ClaimDevice(nv, "here", "gpu-1-mig-0"))
        )
        assert visible_devices(mig, self.published()) == "GPU-0,MIG-1-0"
        assert visible_devices(task, self.published()) == "1"  # no claims: its GPUs
        assert visible_devices(dataclasses.replace(task, gpus=()), None) == ""

    def test_a_device_not_here_is_an_error(self, tmp_path: Path) -> None:
        task = request(tmp_path, "r", ["x"])
        wrong = dataclasses.replace(
            task, devices=(ClaimDevice("gpu.nvidia.com", "elsewhere", "gpu-0"),)
        )
        with pytest.raises(ValueError, match=r"gpu-0 of pool elsewhere .* not a GPU of this"):
            visible_devices(wrong, self.published())

    def test_a_process_sees_its_claim_gpu_or_none(self, tmp_path: Path) -> None:
        backend = LocalBackend(tmp_path / "run", node_name="here", published=self.published())
        assert backend.inventory().nodes[0].gpu_count == 2
        script = "import os; print(repr(os.environ['CUDA_VISIBLE_DEVICES']))"

        def task(rid: str) -> LaunchRequest:
            return request(tmp_path, rid, [sys.executable, "-c", script])

        device = ClaimDevice("gpu.nvidia.com", "here", "gpu-1-mig-0")
        backend.start(dataclasses.replace(task("mine"), gpus=(), devices=(device,)))
        backend.start(dataclasses.replace(task("none"), gpus=()))
        bad = ClaimDevice("gpu.nvidia.com", "here", "gpu-9")
        backend.start(dataclasses.replace(task("bad"), devices=(bad,)))
        for rid in ("mine", "none"):
            assert_reaches_state(backend, rid, TaskState.SUCCEEDED)
        assert_reaches_state(backend, "bad", TaskState.FAILED)
        assert (tmp_path / "logs" / "mine.log").read_text() == "'MIG-1-0'\n"
        assert (tmp_path / "logs" / "none.log").read_text() == "''\n"
        assert "gpu-9 of pool here" in (tmp_path / "logs" / "bad.log").read_text()


def test_an_ended_task_reports_when_it_really_ran(backend: LocalBackend, tmp_path: Path) -> None:
    """A task that ends before anyone asked is still known to have run, from when to when
    (the usage ledger bills an attempt only with a start and an end)."""
    before = time.time()
    backend.start(request(tmp_path, "timed", ["sleep", "0.5"]))
    time.sleep(1.5)  # ended before the first question
    answer = backend.status(["timed"])["timed"]
    after = time.time()
    assert answer.state is TaskState.SUCCEEDED
    assert answer.started_at is not None and answer.finished_at is not None
    assert before - 1 <= answer.started_at.timestamp() <= answer.finished_at.timestamp() <= after
    assert answer.finished_at.timestamp() - answer.started_at.timestamp() >= 0.4


def test_a_task_refused_before_it_started_has_no_start_time(
    backend: LocalBackend, tmp_path: Path
) -> None:
    backend.start(request(tmp_path, "refused", ["/no/such/program"]))
    assert_reaches_state(backend, "refused", TaskState.FAILED)
    assert backend.status(["refused"])["refused"].started_at is None
