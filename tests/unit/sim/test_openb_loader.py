"""Loading openb node and pod CSVs: good files load; a bad row names file, row and reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from aipaas.scheduler.framework.cluster import NodeSpec
from aipaas.scheduler.framework.types import PodRequest
from aipaas.sim.openb import TraceError, load_nodes, load_pods

SAMPLE = Path(__file__).parents[2] / "data" / "openb"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos"
NODES = [
    NodeSpec("node-a", 64_000, 262_144, 2, "P100"),
    NodeSpec("node-b", 96_000, 786_432, 8, "T4"),
]


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def node_error(tmp_path: Path, *rows: str) -> tuple[Path, str]:
    path = write(tmp_path, "nodes.csv", NODE_HEADER, *rows)
    with pytest.raises(TraceError) as error:
        load_nodes(path)
    return path, str(error.value)


def pod_error(tmp_path: Path, *rows: str) -> tuple[Path, str]:
    path = write(tmp_path, "pods.csv", POD_HEADER, *rows)
    with pytest.raises(TraceError) as error:
        load_pods(path, NODES)
    return path, str(error.value)


class TestGoodFiles:
    def test_nodes(self, tmp_path: Path) -> None:
        path = write(
            tmp_path,
            "nodes.csv",
            NODE_HEADER,
            "node-a,64000,262144,2,P100",
            " node-b ,96000,786432,8, T4 ",
            "node-c,32000,1024,0,T4",  # no GPUs: the model is dropped
        )
        assert load_nodes(path) == [
            NodeSpec("node-a", 64_000, 262_144, 2, "P100"),
            NodeSpec("node-b", 96_000, 786_432, 8, "T4"),
            NodeSpec("node-c", 32_000, 1024, 0, ""),
        ]

    def test_pods(self, tmp_path: Path) -> None:
        path = write(
            tmp_path,
            "pods.csv",
            POD_HEADER,
            "p0,12000,16384,1,1000,,LS",
            "p1,8000,30517,1,230,P100,BE",
            "p2,4000,1024,1,1500,T4|P100,LS",  # clipped to 1000
            "p3,88000,2048,8,1000,nan,LS",
            "p4,32000,65536,0,0,,LS",
            "p5,1000,10,0,500,T4,LS",  # no GPU: milli and models are dropped
            "p6,1000.0,10.0,2,1000.0,,LS",
        )
        assert load_pods(path, NODES) == [
            PodRequest("p0", 12_000, 16_384, 1, 1000, ()),
            PodRequest("p1", 8_000, 30_517, 1, 230, ("P100",)),
            PodRequest("p2", 4_000, 1024, 1, 1000, ("T4", "P100")),
            PodRequest("p3", 88_000, 2048, 8, 1000, ()),
            PodRequest("p4", 32_000, 65_536, 0, 0, ()),
            PodRequest("p5", 1_000, 10, 0, 0, ()),
            PodRequest("p6", 1_000, 10, 2, 1000, ()),
        ]

    def test_pods_without_gpu_spec_column(self, tmp_path: Path) -> None:
        path = write(
            tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli", "p,1,2,1,5"
        )
        assert load_pods(path, NODES) == [PodRequest("p", 1, 2, 1, 5)]

    def test_sample(self) -> None:
        nodes = load_nodes(SAMPLE / "openb_node_list_sample.csv")
        assert len(nodes) == 152
        assert sum(n.gpu_count for n in nodes) == 770
        assert nodes[0] == NodeSpec("openb-node-0000", 64_000, 262_144, 2, "P100")
        pods = load_pods(SAMPLE / "openb_pod_list_sample.csv", nodes)
        assert len(pods) == 1019
        assert sum(p.gpu_milli_total for p in pods) == 761_330
        assert sum(1 for p in pods if p.is_shared) == 381
        assert all(not p.gpu_models for p in pods)
        spec = load_pods(SAMPLE / "openb_pod_list_gpuspec_sample.csv", nodes)
        assert len(spec) == 1019
        assert sum(1 for p in spec if p.gpu_models) == 92
        assert spec[1].gpu_models == ("T4",)
        assert ("V100M16", "V100M32") in {p.gpu_models for p in spec}


class TestBadNodes:
    def test_missing_column(self, tmp_path: Path) -> None:
        path = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu", "a,1,1,0")
        with pytest.raises(TraceError) as error:
            load_nodes(path)
        assert str(error.value) == f"{path}: missing column(s) model"

    def test_non_numeric_cpu(self, tmp_path: Path) -> None:
        path, message = node_error(tmp_path, "a,1000,10,0,", "b,lots,10,0,")
        assert message == f"{path} row 3: cpu_milli is not a number: 'lots'"

    def test_negative_gpu(self, tmp_path: Path) -> None:
        path, message = node_error(tmp_path, "a,1000,10,-2,T4")
        assert message == f"{path} row 2: gpu must be >= 0, got -2"

    def test_duplicate_name(self, tmp_path: Path) -> None:
        path, message = node_error(tmp_path, "a,1,1,0,", "b,1,1,0,", "a,2,2,0,")
        assert message == f"{path} row 4: node a appears twice"

    def test_gpus_without_model(self, tmp_path: Path) -> None:
        path, message = node_error(tmp_path, "a,1,1,0,", "b,1000,10,4,")
        assert message == f"{path} row 3: node b has 4 GPUs but no model"

    def test_empty_name(self, tmp_path: Path) -> None:
        path, message = node_error(tmp_path, ",1,1,0,")
        assert message == f"{path} row 2: sn (node name) is empty"

    def test_empty_file(self, tmp_path: Path) -> None:
        path = write(tmp_path, "nodes.csv")
        with pytest.raises(TraceError) as error:
            load_nodes(path)
        assert (
            str(error.value) == f"{path}: missing column(s) sn, cpu_milli, memory_mib, gpu, model"
        )

    def test_header_only(self, tmp_path: Path) -> None:
        path = write(tmp_path, "nodes.csv", NODE_HEADER)
        with pytest.raises(TraceError) as error:
            load_nodes(path)
        assert str(error.value) == f"{path}: no nodes"

    def test_missing_file(self, tmp_path: Path) -> None:
        path = tmp_path / "absent.csv"
        with pytest.raises(TraceError) as error:
            load_nodes(path)
        assert str(error.value) == f"{path}: cannot read: No such file or directory"


class TestBadPods:
    def test_missing_column(self, tmp_path: Path) -> None:
        path = write(tmp_path, "pods.csv", "name,cpu_milli,memory_mib,gpu_milli", "p,1,1,0")
        with pytest.raises(TraceError) as error:
            load_pods(path, NODES)
        assert str(error.value) == f"{path}: missing column(s) num_gpu"

    def test_negative_num_gpu(self, tmp_path: Path) -> None:
        path, message = pod_error(tmp_path, "p0,1,1,0,0,,LS", "p1,1,1,-1,1000,,LS")
        assert message == f"{path} row 3: num_gpu must be >= 0, got -1"

    def test_non_numeric_cpu(self, tmp_path: Path) -> None:
        path, message = pod_error(tmp_path, "p0,1,1,0,0,,LS", "p1,1,1,0,0,,LS", "p2,x1,1,0,0,,LS")
        assert message == f"{path} row 4: cpu_milli is not a number: 'x1'"

    def test_empty_number(self, tmp_path: Path) -> None:
        path, message = pod_error(tmp_path, "p0,1,,0,0,,LS")
        assert message == f"{path} row 2: memory_mib is not a number: ''"

    def test_unknown_model(self, tmp_path: Path) -> None:
        path, message = pod_error(tmp_path, "p0,1,1,1,500,T4|A100|H100,LS")
        assert message == (
            f"{path} row 2: unknown GPU model A100, H100 in gpu_spec (the cluster has P100, T4)"
        )

    def test_duplicate_name(self, tmp_path: Path) -> None:
        path, message = pod_error(tmp_path, "p0,1,1,0,0,,LS", "p0,1,1,0,0,,LS")
        assert message == f"{path} row 3: pod p0 appears twice"

    def test_multi_gpu_with_fraction(self, tmp_path: Path) -> None:
        path, message = pod_error(tmp_path, "p0,1,1,2,500,,LS")
        assert message == f"{path} row 2: 2 GPUs must be whole (gpu_milli 1000), got 500"

    def test_gpu_without_milli(self, tmp_path: Path) -> None:
        path, message = pod_error(tmp_path, "p0,1,1,1,0,,LS")
        assert message == f"{path} row 2: num_gpu is 1 but gpu_milli is 0"

    def test_negative_milli(self, tmp_path: Path) -> None:
        path, message = pod_error(tmp_path, "p0,1,1,1,-5,,LS")
        assert message == f"{path} row 2: gpu_milli must be >= 0, got -5"

    def test_empty_name(self, tmp_path: Path) -> None:
        path, message = pod_error(tmp_path, " ,1,1,0,0,,LS")
        assert message == f"{path} row 2: name is empty"

    def test_empty_file(self, tmp_path: Path) -> None:
        path = write(tmp_path, "pods.csv")
        with pytest.raises(TraceError) as error:
            load_pods(path, NODES)
        assert str(error.value) == (
            f"{path}: missing column(s) name, cpu_milli, memory_mib, num_gpu, gpu_milli"
        )

    def test_header_only(self, tmp_path: Path) -> None:
        path = write(tmp_path, "pods.csv", POD_HEADER)
        with pytest.raises(TraceError) as error:
            load_pods(path, NODES)
        assert str(error.value) == f"{path}: no pods"

    def test_trace_error_is_a_value_error(self) -> None:
        assert issubclass(TraceError, ValueError)
