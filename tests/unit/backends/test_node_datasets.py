"""The cluster backends' node caches (backends/node_datasets.py) and streaming (data/stream.py)
without a cluster: what a staged task runs, its stage run for real on a file:// dataset, the
node names a cache directory accepts, loads, and the variables of a streamed dataset."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from aipaas.backends.base import Inventory, LaunchRequest, NodeInfo
from aipaas.backends.datasets import DatasetMount
from aipaas.backends.node_datasets import NodeCachesConfig, NodeDatasetCaches
from aipaas.data.entry import LOAD, MANIFEST, Entry
from aipaas.data.source import SourceSpec
from aipaas.data.stream import set_task_variables, stream_variables


class Caches(NodeDatasetCaches):
    def __init__(self, root: Path, file_roots: tuple[str, ...] = ()) -> None:
        self.run_dir = root / "run"
        self.dataset_caches_config = NodeCachesConfig(root / "caches", 1 << 30, file_roots)
        self.loads: list[tuple[str, Path]] = []

    def _start_load(self, node: str, entry: Entry) -> None:
        self.loads.append((node, entry.path))


def _request(
    source: dict[str, object], command: tuple[str, ...], stream: bool = False
) -> LaunchRequest:
    mount = DatasetMount("train", "acme/train-0123", "/data/train", source, stream=stream)
    return LaunchRequest(
        request_id="uid.reader-0.0",
        job="j",
        task="reader-0",
        tenant="acme",
        node="n1",
        command=command,
        env={"RANK": "0"},
        working_dir=None,
        gpus=(),
        gpu_milli=0,
        log_path="",
        datasets=(mount,),
    )


def _inventory(*names: str) -> Inventory:
    return Inventory(
        tuple(NodeInfo(name=n, backend="slurm", cpu_milli=1000, memory_mib=1024) for n in names)
    )


def test_a_staged_task_reads_its_dataset_from_the_nodes_cache_and_keeps_its_exit_code(
    tmp_path: Path,
) -> None:
    data = tmp_path / "src"
    (data / "nested").mkdir(parents=True)
    (data / "a.bin").write_bytes(os.urandom(5000))
    (data / "nested" / "b.txt").write_text("b\n")
    caches = Caches(tmp_path, file_roots=(str(tmp_path),))
    source = SourceSpec(f"file://{data}", file_roots=("/",)).to_json()  # the node's roots win
    script = 'cat "$AIPAAS_DATASET_TRAIN_PATH/nested/b.txt"; echo "rank=$RANK"; exit 3'
    directory = tmp_path / "job" / "uid.reader-0.0"
    staged, files = caches.staged(_request(source, ("/bin/bash", "-c", script)), directory, None)
    assert staged.env["AIPAAS_DATASET_TRAIN_PATH"] == str(directory / "data/train")
    assert staged.env["AIPAAS_DATASETS"] == "train"
    stage = json.loads(files[str(directory / "stage.json")])
    assert stage["cache_root"] == str((tmp_path / "caches" / "n1").resolve())
    assert stage["datasets"][0]["source"]["file_roots"] == [str(tmp_path)]
    directory.mkdir(parents=True)
    for path, text in files.items():
        Path(path).write_text(text)
    done = subprocess.run(
        list(staged.command), env={**staged.env, "PATH": "/usr/bin:/bin"}, capture_output=True
    )
    assert done.returncode == 3, done.stderr
    assert b"b\nrank=0\n" in done.stdout and b"dataset train: loaded" in done.stdout
    assert (directory / "exit").read_text() == "3\n"
    assert not (directory / "stage.json").exists()  # its credentials are not left behind
    entry = caches.node_cache("n1").entry("acme/train-0123")
    assert (entry.data / "a.bin").read_bytes() == (data / "a.bin").read_bytes()
    assert stat.S_IMODE((entry.data / "a.bin").stat().st_mode) == 0o444


def test_a_request_without_datasets_runs_as_it_is() -> None:
    caches = Caches(Path("/nonexistent"))
    request = _request({}, ("true",))
    bare = replace(request, datasets=())
    assert caches.staged(bare, Path("/x"), None) == (bare, {})


@pytest.mark.parametrize("node", ["../etc", ".hidden", "a/b", ""])
def test_a_node_name_that_is_no_directory_name_is_refused(tmp_path: Path, node: str) -> None:
    with pytest.raises(ValueError, match="cache directory"):
        Caches(tmp_path).node_cache(node)


def test_loads_go_only_to_known_nodes_one_at_a_time(tmp_path: Path) -> None:
    caches = Caches(tmp_path)
    source = SourceSpec("s3://bucket/x", credentials={"accessKeyId": "k"}).to_json()
    assert caches.load_dataset("n1", "acme/train-0123", source) is False  # no inventory yet
    assert caches.cache_capacity("n1") is None
    annotated = caches.with_cache_states(_inventory("n1", "n2"))
    assert all("aipaas.dev/dataset-cache" in n.annotations for n in annotated.nodes)
    assert caches.cache_capacity("n1") == 1 << 30
    assert caches.load_dataset("n1", "acme/train-0123", source) is True
    entry = caches.node_cache("n1").entry("acme/train-0123")
    assert caches.loads == [("n1", entry.path)]
    assert stat.S_IMODE((entry.path / LOAD).stat().st_mode) == 0o600  # it holds credentials
    assert caches.load_dataset("n1", "acme/train-0123", source) is False  # one is waiting
    assert caches.load_dataset("n3", "acme/train-0123", source) is False


def test_stream_variables_only_for_a_cold_cache_of_a_streaming_remote_dataset(
    tmp_path: Path,
) -> None:
    entry = Entry(tmp_path / "acme" / "train-0123")
    source = SourceSpec(
        "s3://bucket/train",
        endpoint="http://127.0.0.1:9",
        credentials={"accessKeyId": "k", "secretAccessKey": "s"},
    )
    item = {"stream": True, "variable": "AIPAAS_DATASET_TRAIN_PATH"}
    assert stream_variables({**item, "stream": False}, entry, source) is None
    assert stream_variables(item, entry, SourceSpec(f"file://{tmp_path}")) is None
    found = stream_variables(item, entry, source)
    assert found is not None
    assert found["AIPAAS_DATASET_TRAIN_PATH"] is None
    assert found["AIPAAS_DATASET_TRAIN_URL"] == "s3://bucket/train"
    options = json.loads(found["AIPAAS_DATASET_TRAIN_STORAGE_OPTIONS"] or "")
    assert options["key"] == "k" and options["client_kwargs"]["endpoint_url"] == source.endpoint
    entry.write_json(MANIFEST, {"url": source.url, "files": {}, "size": 0, "complete": True})
    assert stream_variables(item, entry, source) is None  # complete: the cache serves it

    refused = SourceSpec("https://169.254.169.254/latest")
    with pytest.raises(Exception, match="link-local"):
        stream_variables(item, entry, refused)


def test_streamed_variables_reach_the_runners_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIPAAS_DATASET_TRAIN_PATH", "/gone")
    (tmp_path / "launch.json").write_text(
        json.dumps({"command": ["true"], "env": {"AIPAAS_DATASET_TRAIN_PATH": "/gone", "A": "1"}})
    )
    set_task_variables(tmp_path, {"AIPAAS_DATASET_TRAIN_PATH": None, "AIPAAS_X_URL": "s3://b"})
    assert "AIPAAS_DATASET_TRAIN_PATH" not in os.environ
    assert os.environ["AIPAAS_X_URL"] == "s3://b"
    launch = json.loads((tmp_path / "launch.json").read_text())
    assert launch["env"] == {"A": "1", "AIPAAS_X_URL": "s3://b"}
    monkeypatch.delenv("AIPAAS_X_URL")


def test_a_lease_taken_on_another_host_is_never_judged_dead_here(tmp_path: Path) -> None:
    """The server reads the nodes' caches but cannot see their processes: an entry a task on
    another node reads is not evicted, while a dead lease of this host is cleaned."""
    caches = Caches(tmp_path)
    cache = caches.node_cache("n1")
    entry = cache.entry("acme/train-0123")
    entry.data.mkdir(parents=True)
    entry.add_lease("uid.reader-0.0", 2**22 + 7)  # no such process here
    assert entry.live_leases() == []
    entry.leases.joinpath("uid.reader-1.0").write_text(f"{2**22 + 7} some-other-node")
    assert entry.live_leases() == ["uid.reader-1.0"]
    assert cache.evict("acme/train-0123") is False
    assert entry.path.exists()
