"""The driver process's loop (backend.py starts it with ``spawn``): calls come over a pipe as
``(method, args)``, answers go back as ``("ok", value)`` or ``("error", exception)``.

Kept apart from driver.py so that the server, which pickles ``serve`` by reference to start
the process, never imports ray itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1


def serve(
    conn: Connection,
    run_dir: Path,
    address: str | None,
    options: dict[str, Any],
    changes: Connection | None = None,
) -> None:
    """``changes``: where the driver says a task ended (RayDriver.on_change)."""
    # The server's process ends this one: Ctrl-C is its business, and its death (kill -9
    # included) ends the driver (the actors are detached and stay).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    from aipaas.backends.ray.driver import RayDriver

    driver = RayDriver(run_dir, address, **options)
    if changes is not None:
        told = changes

        def tell() -> None:
            told.send(None)

        driver.on_change = tell
    try:
        driver.connect()
    except Exception as err:  # the backend gives this driver up and starts another later
        conn.send(("error", f"{type(err).__name__}: {err}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            method, args = conn.recv()
        except (EOFError, OSError):
            break  # the server is gone
        if method == "close":
            driver.close()
            conn.send(("ok", None))
            break
        try:
            value = getattr(driver, method)(*args)
        except ValueError as err:  # a start refused (no such node): the controller's Lost
            conn.send(("error", ValueError(str(err))))
        except Exception as err:  # Ray's own errors do not always pickle: their words do
            conn.send(("error", RuntimeError(f"{type(err).__name__}: {err}")))
        else:
            conn.send(("ok", value))
