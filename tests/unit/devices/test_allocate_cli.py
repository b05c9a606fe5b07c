"""`aipaas allocate --dry-run -f FILE -o json`: the what-if face of the allocator."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from aipaas.cli.app import app

EXAMPLE = Path(__file__).parents[3] / "examples" / "dra" / "whatif-h100.yaml"
runner = CliRunner()


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, ["allocate", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


class TestAllocateDryRun:
    def test_fits(self) -> None:
        code, out, _ = run("--dry-run", "-f", str(EXAMPLE), "-o", "json")
        assert code == 0
        row = {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "h100p-0",
               "consumedCapacity": {}}  # fmt: skip
        assert json.loads(out) == {
            "fits": True,
            "node": "h100p-0",
            "allocations": {
                "trainer": [{**row, "device": f"gpu-{i}"} for i in (4, 5, 6, 7)],
            },
            "reasons": [],
        }

    def test_does_not_fit_exits_zero_with_reasons(self) -> None:
        text = EXAMPLE.read_text().replace("count: 4", "count: 5")
        code, out, _ = run("--dry-run", "-f", "-", "-o", "json", stdin=text)
        assert code == 0
        assert json.loads(out) == {
            "fits": False,
            "reasons": [
                '1 node of class [8x H100] (h100p-0): claim "trainer": 7 matching devices are '
                "free but no NUMA node has 5 free (matchAttribute gpu.nvidia.com/numaNode; the "
                "most in one is 4)"
            ],
        }

    def test_text_output(self) -> None:
        code, out, _ = run("--dry-run", "-f", str(EXAMPLE))
        assert code == 0
        assert out.splitlines()[0] == "fits on node h100p-0"
        assert "  trainer/gpus: h100p-0/gpu-4" in out.splitlines()

    def test_invalid_input_names_object_field_and_problem(self) -> None:
        text = EXAMPLE.read_text().replace("count: 4", "count: four")
        code, out, err = run("--dry-run", "-f", "-", "-o", "json", stdin=text)
        assert code == 2
        assert out == ""
        assert 'ResourceClaim "trainer": spec.devices.requests[0].exactly.count:' in err

    def test_bad_cel_names_line_and_column(self) -> None:
        text = EXAMPLE.read_text().replace(
            'compareTo(quantity("80Gi")) >= 0', 'compareTo(quantity("80Gi")) >= zero'
        )
        code, _, err = run("--dry-run", "-f", "-", stdin=text)
        assert code == 2
        assert "selectors[0].cel.expression: CEL line 1, column 73: undeclared reference" in err

    def test_existing_allocation_of_an_unknown_device(self) -> None:
        text = EXAMPLE.read_text().replace("device: gpu-1}", "device: gpu-99}")
        code, _, err = run("--dry-run", "-f", "-", stdin=text)
        assert code == 2
        assert "'gpu-99' of pool 'h100p-0', which is not published" in err

    def test_needs_dry_run(self) -> None:
        code, _, err = run("-f", str(EXAMPLE))
        assert code == 2
        assert "only --dry-run is supported" in err

    def test_missing_file(self, tmp_path: Path) -> None:
        code, _, err = run("--dry-run", "-f", str(tmp_path / "nope.yaml"))
        assert code == 2
        assert "nope.yaml: cannot read" in err


class TestWhatIf:
    def test_template_stands_for_its_claim(self) -> None:
        text = EXAMPLE.read_text().replace(
            "kind: ResourceClaim\nmetadata:\n  name: trainer\nspec:\n  devices:",
            "kind: ResourceClaimTemplate\nmetadata:\n  name: trainer\nspec:\n  spec:\n    devices:",
        )
        # Indent the template's claim spec one level deeper.
        head, _, tail = text.partition("    devices:\n")
        body, sep, rest = tail.partition("---")
        text = head + "    devices:\n" + "".join("  " + line + "\n" for line in body.splitlines())
        text += sep + rest
        code, out, err = run("--dry-run", "-f", "-", "-o", "json", stdin=text)
        assert code == 0, err
        assert list(json.loads(out)["allocations"]) == ["trainer"]

    def test_duplicate_claims_are_invalid(self) -> None:
        text = EXAMPLE.read_text().replace("name: someone-else", "name: trainer")
        code, _, err = run("--dry-run", "-f", "-", stdin=text)
        assert code == 2
        assert 'ResourceClaim "trainer" appears more than once' in err
