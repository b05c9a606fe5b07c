"""The one resource vector (api/resource_vector.py): what a request totals to, and the
arithmetic quotas and fair shares rely on."""

from __future__ import annotations

from aipaas.api.resource_vector import NO_LIMIT, Resources
from aipaas.api.resources import Amounts


def test_a_request_totals_its_gpus_times_their_share() -> None:
    # two GPUs at half each hold one whole GPU's worth; CPU and memory as asked
    assert Amounts(cpu_milli=1500, memory_mib=2048, gpu_count=2, gpu_milli=500).total() == (
        Resources(gpu_milli=1000, cpu_milli=1500, memory_mib=2048)
    )


def test_a_cpu_only_request_totals_no_gpu() -> None:
    assert Amounts(cpu_milli=250, memory_mib=64).total() == Resources(0, 250, 64, 0)


def test_sums_differences_and_scaling_are_per_resource() -> None:
    a = Resources(1000, 2000, 3000, 40)
    b = Resources(500, 500, 1000, 10)
    assert a + b == Resources(1500, 2500, 4000, 50)
    assert a - b == Resources(500, 1500, 2000, 30)
    assert b.scaled(3) == Resources(1500, 1500, 3000, 30)


def test_fits_within_needs_every_resource_at_most_the_limit() -> None:
    limit = Resources(1000, 1000, 1000, 1000)
    assert Resources(1000, 1000, 1000, 1000).fits_within(limit)
    assert not Resources(0, 0, 0, 1001).fits_within(limit)
    assert Resources(10**12, 10**12, 10**12, 10**12).fits_within(NO_LIMIT)


def test_dominant_share_is_the_largest_fraction_of_a_measured_resource() -> None:
    capacity = Resources(gpu_milli=8000, cpu_milli=64000, memory_mib=0)
    # 2 of 8 GPUs (0.25) against 32 of 64 cores (0.5); memory has no capacity: not counted
    assert Resources(2000, 32000, 999, 0).dominant_share(capacity) == 0.5
    assert Resources().dominant_share(Resources()) == 0.0
