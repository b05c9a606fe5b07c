"""The backtracking search is complete: on small inputs it finds an allocation exactly when a
brute-force enumeration of every assignment finds one."""

from __future__ import annotations

from itertools import combinations, product
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aipaas.devices.allocator import allocate_pod
from aipaas.devices.inventory import Inventory
from tests.unit.devices.devices_builders import CLASSES, DRIVER, claim, gpu, node_slice, req

MODEL = f'device.attributes["{DRIVER}"].model'

devices = st.lists(
    st.tuples(st.sampled_from(["A", "B"]), st.integers(0, 1), st.integers(0, 2)),
    min_size=1,
    max_size=6,
)
alternative = st.tuples(st.sampled_from([None, "A", "B"]), st.integers(1, 3))
requests = st.lists(st.lists(alternative, min_size=1, max_size=2), min_size=1, max_size=3)
constraint = st.sampled_from([None, "match-numa", "distinct-rack"])


def brute_force(
    shape: list[tuple[str, int, int]],
    wanted: list[list[tuple[str | None, int]]],
    rule: str | None,
) -> bool:
    for choice in product(*wanted):
        for picks in _assign(list(choice), shape, set()):
            chosen = [i for group in picks for i in group]
            if rule == "match-numa" and len({shape[i][1] for i in chosen}) > 1:
                continue
            if rule == "distinct-rack" and len({shape[i][2] for i in chosen}) < len(chosen):
                continue
            return True
    return False


def _assign(
    choice: list[tuple[str | None, int]], shape: list[tuple[str, int, int]], used: set[int]
) -> Any:
    if not choice:
        yield []
        return
    model, count = choice[0]
    pool = [i for i in range(len(shape)) if i not in used and model in (None, shape[i][0])]
    for group in combinations(pool, count):
        for rest in _assign(choice[1:], shape, used | set(group)):
            yield [list(group), *rest]


@settings(max_examples=150, deadline=None)
@given(devices, requests, constraint)
def test_search_agrees_with_brute_force(
    shape: list[tuple[str, int, int]],
    wanted: list[list[tuple[str | None, int]]],
    rule: str | None,
) -> None:
    published = node_slice(
        "n",
        [
            gpu(f"gpu-{i}", model=model, numa=numa, attrs={"rack": {"int": rack}})
            for i, (model, numa, rack) in enumerate(shape)
        ],
    )
    built = []
    for r, alternatives in enumerate(wanted):
        bodies = [
            req(f"s{a}", count=count, sel=(f'{MODEL} == "{model}"',) if model else ())
            for a, (model, count) in enumerate(alternatives)
        ]
        if len(bodies) == 1:
            built.append({**bodies[0], "name": f"r{r}"})
        else:
            built.append({"name": f"r{r}", "firstAvailable": [
                {"name": b["name"], **b["exactly"]} for b in bodies
            ]})  # fmt: skip
    constraints = None
    if rule == "match-numa":
        constraints = [{"matchAttribute": f"{DRIVER}/numaNode"}]
    elif rule == "distinct-rack":
        constraints = [{"distinctAttribute": f"{DRIVER}/rack"}]
    pod = [claim("c", *built, constraints=constraints)]
    result = allocate_pod(pod, Inventory([published]), CLASSES)
    assert result.fits == brute_force(shape, wanted, rule), result.reasons
