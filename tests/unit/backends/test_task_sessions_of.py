"""Which backends the API is told can open exec sessions (backends/task_exec.py's
``task_sessions_of``): a wrapper or a composite only when what they hold can, so that a
server whose backend cannot answers 503 saying so."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from aipaas.backends.task_exec import TaskSession, task_sessions_of


class Sessions:
    def open_session(
        self, request_id: str, command: Sequence[str], *, tty: bool, rows: int, cols: int
    ) -> TaskSession | None:
        return None


class NoSessions:
    pass


class Wrapper(Sessions):
    """As fencing.Fenced: the method always, the capability its inner's."""

    def __init__(self, inner: object) -> None:
        self.inner = inner


class Members(Sessions):
    """As composite.CompositeBackend: the method always, the capability any member's."""

    def __init__(self, *backends: object) -> None:
        self.backends = backends


@pytest.mark.parametrize(
    ("backend", "want_able"),
    [
        pytest.param(Sessions(), True, id="a backend that can"),
        pytest.param(NoSessions(), False, id="one that cannot (Kubernetes)"),
        pytest.param(Wrapper(Sessions()), True, id="fenced local or Slurm"),
        pytest.param(Wrapper(NoSessions()), False, id="fenced Ray"),
        pytest.param(Members(Wrapper(Sessions()), NoSessions()), True, id="local and simulated"),
        pytest.param(Members(Wrapper(NoSessions()), NoSessions()), False, id="none of them can"),
    ],
)
def test_a_wrapper_or_composite_can_only_when_what_it_holds_can(
    backend: object, want_able: bool
) -> None:
    assert (task_sessions_of(backend) is not None) == want_able
