"""Weight 0 (Kueue's fair-sharing weight 0, KAI's over-quota weight 0): a child of weight 0 has
no share above its guarantee while a weighted sibling still wants more, and divides only what
the weighted siblings leave."""

from __future__ import annotations

import pytest

from aipaas.api.queue import Queue, effective_weights
from aipaas.scheduler.batch.fairshare_split import divide

WHOLE = 1000  # one GPU in milli-GPUs


@pytest.mark.parametrize(
    ("available", "need", "guaranteed", "weights", "expected"),
    [
        # the weighted child takes all it wants before the weight-0 one gets anything
        (4000, [4000, 4000], [0, 0], [0.0, 1.0], [0, 4000]),
        # what the weighted child leaves goes to the weight-0 one
        (4000, [4000, 1000], [0, 0], [0.0, 1.0], [3000, 1000]),
        # a guarantee is kept whatever the weight
        (4000, [4000, 4000], [1000, 0], [0.0, 1.0], [1000, 3000]),
        # weight-0 children alone divide equally (largest remainder, first created first)
        (3000, [4000, 4000], [0, 0], [0.0, 0.0], [2000, 1000]),
        # two weighted and one weight-0 child: the weighted ones by 2:1, then the rest
        (6000, [4000, 3000, 1000], [0, 0, 0], [0.0, 2.0, 1.0], [2000, 3000, 1000]),
    ],
)
def test_weight_zero_takes_only_what_weighted_siblings_leave(
    available: int,
    need: list[int],
    guaranteed: list[int],
    weights: list[float],
    expected: list[int],
) -> None:
    priorities = [0] * len(need)
    assert divide(available, need, guaranteed, weights, priorities, WHOLE) == expected


def test_queue_weight_zero_is_accepted_and_gets_no_effective_weight() -> None:
    zero = Queue.model_validate(
        {"metadata": {"name": "spare", "tenant": "t"}, "spec": {"weight": 0}}
    )
    one = Queue.model_validate({"metadata": {"name": "main", "tenant": "t"}, "spec": {}})
    assert effective_weights({}, [zero, one]) == {("t", "spare"): 0.0, ("t", "main"): 1.0}
    # every queue of a tenant at weight 0: none has a weight (no division by zero)
    assert effective_weights({}, [zero]) == {("t", "spare"): 0.0}
