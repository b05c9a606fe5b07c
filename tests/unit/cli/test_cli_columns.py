"""The column registry of `aipaas get` and the human-readable numbers in its cells."""

from __future__ import annotations

from datetime import UTC, datetime

from aipaas.cli import columns, humanize

NOW = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)


def job(**status: object) -> dict[str, object]:
    return {
        "kind": "Job",
        "metadata": {"name": "train", "tenant": "acme"},
        "spec": {
            "queue": "research",
            "priority": 200,
            "priorityClassName": "high",
            "tasks": [
                {"name": "w", "replicas": 4, "resources": {"gpu": {"count": 2}}},
                {"name": "x", "replicas": 1, "resources": {"gpu": {"count": 1, "fraction": 0.5}}},
                {"name": "cpu-only", "replicas": 3, "resources": {}},
            ],
        },
        "status": status,
    }


class TestRegistry:
    def test_a_registered_kind_gets_its_columns_wide_only_in_wide(self) -> None:
        columns.register(
            "Widget",
            [("NAME", columns.meta("name")), ("SIZE", columns.spec("size"), True)],
        )
        assert [c.header for c in columns.columns_for("Widget")] == ["NAME"]
        assert [c.header for c in columns.columns_for("Widget", wide=True)] == ["NAME", "SIZE"]
        item = {"metadata": {"name": "w1"}, "spec": {"size": 3}}
        assert columns.row(columns.columns_for("Widget", wide=True), item) == ["w1", "3"]

    def test_an_unknown_kind_gets_name_tenant_age(self) -> None:
        assert [c.header for c in columns.columns_for("Nothing")] == ["NAME", "TENANT", "AGE"]

    def test_a_getter_that_fails_shows_a_question_mark_and_none_a_dash(self) -> None:
        shown = [columns.Column("X", lambda o: o["missing"]), columns.Column("Y", lambda o: None)]
        assert columns.row(shown, {}) == ["?", "-"]

    def test_job_columns(self) -> None:
        headers = [c.header for c in columns.columns_for("Job")]
        for header in ("AGE", "PRIORITY", "GPUS", "DURATION", "PHASE", "QUEUE"):
            assert header in headers
        assert "MESSAGE" not in headers
        assert "MESSAGE" in [c.header for c in columns.columns_for("Job", wide=True)]

    def test_job_gpus_count_replicas_and_fractions(self) -> None:
        assert columns.job_gpus(job()) == "8.5"
        assert columns.job_priority(job()) == "high"


class TestHumanize:
    def test_spans_like_kubectl(self) -> None:
        assert [humanize.span(s) for s in (0, 59, 61, 600, 3599)] == [
            "0s",
            "59s",
            "1m1s",
            "10m",
            "59m",
        ]
        assert [humanize.span(s) for s in (3660, 8 * 3600 + 60, 36 * 3600)] == ["1h1m", "8h", "36h"]
        assert humanize.span(3 * 86400 + 5) == "3d"

    def test_age_and_duration(self) -> None:
        assert humanize.age("2026-01-02T11:55:00Z", NOW) == "5m"
        assert humanize.age(None, NOW) == "-"
        assert humanize.age("not a time", NOW) == "-"
        assert humanize.duration("2026-01-02T10:00:00+00:00", "2026-01-02T10:01:30Z") == "1m30s"
        assert humanize.duration("2026-01-02T11:00:00Z", None, NOW) == "1h"
        assert humanize.duration(None, None, NOW) == "-"

    def test_quantities(self) -> None:
        assert humanize.quantity_bytes("17179869184") == "16Gi"
        assert humanize.quantity_bytes("1536Mi") == "1.5Gi"
        assert humanize.quantity_bytes(512) == "512"
        assert humanize.quantity_bytes("junk") == "junk"
        assert humanize.count(2.0) == "2" and humanize.count(0.5) == "0.5"
        assert humanize.cores("1500m") == "1.5" and humanize.cores("2") == "2"
        assert humanize.cores("0m") == "0" and humanize.cores("junk") == "junk"

    def test_node_columns(self) -> None:
        node = {
            "kind": "Node",
            "metadata": {"name": "n1", "labels": {}},
            "spec": {"backend": "sim", "cpu": "64", "memory": "549755813888", "gpus": {"count": 8}},
            "status": {"ready": True, "allocatedGpus": 2.0, "allocatedCpu": "2500m"},
        }
        shown = columns.columns_for("Node")
        cells = dict(zip([c.header for c in shown], columns.row(shown, node), strict=True))
        assert cells["GPUS USED"] == "2" and cells["CPU USED"] == "2.5"
        assert cells["MEMORY"] == "512Gi" and cells["CPU"] == "64"
