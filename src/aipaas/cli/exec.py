"""`aipaas exec job/NAME [--task T] -- CMD...`: run a command in a running task and print its
output; the command's exit code is this command's.

Who calls it: cli/app.py registers it. It asks the API (``POST /api/v1/jobs/NAME/exec``,
server/exec_routes.py), which runs the command where the task runs: as the task's user, in its
working directory, with its environment, inside its container when it has an image. Only the
job's tenant's members whose role may write jobs may; another tenant's job is not found.
With ``-i`` (``--tty`` for a terminal) it is a session instead (cli/exec_session.py): input,
output as written, the terminal's size, over a WebSocket (server/exec_session.py); without
them no input reaches the command and the output comes when it has ended.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from aipaas.cli import complete, failure
from aipaas.cli.exec_session import run_session

MAX_TIMEOUT_SECONDS = 3600


def register(app: typer.Typer) -> None:
    app.command("exec", no_args_is_help=True)(exec_command)


def exec_command(
    target: Annotated[str, typer.Argument(help="job/NAME", autocompletion=complete.jobs)],
    command: Annotated[list[str], typer.Argument(help="The command, after --.")],
    task: Annotated[
        str | None, typer.Option("--task", help="The task (worker-0); default: the first running.")
    ] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="Tenant (admins).")] = None,
    timeout: Annotated[
        int,
        typer.Option(
            "--timeout", min=1, max=MAX_TIMEOUT_SECONDS, help="Seconds before it is killed."
        ),
    ] = 60,
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive",
            "-i",
            help="A session: standard input goes to the command, output comes as written.",
        ),
    ] = False,
    tty: Annotated[
        bool,
        typer.Option("--tty", help="With a terminal in the task (a shell's prompt); implies -i."),
    ] = False,
) -> None:
    """Run COMMAND in a running task of a job: aipaas exec job/train -- nvidia-smi;
    a shell in it: aipaas exec -i --tty job/train -- bash"""
    kind, _, name = target.rpartition("/")
    if kind not in ("", "job", "jobs") or not name:
        failure.fail(f"exec runs in a job's task: job/NAME, got {target!r}")
    if interactive or tty:
        with failure.client() as client:
            code = run_session(client, name, command, task=task, tenant=tenant, tty=tty)
        raise typer.Exit(code)
    params = {"tenant": tenant} if tenant else None
    with failure.client() as client:
        answer = client._call(  # the SDK has no exec call: the answer is output, not an object
            "POST",
            f"/jobs/{name}/exec",
            params=params,
            json={"command": command, "task": task, "timeoutSeconds": timeout},
            timeout=timeout + 30,
        )
    sys.stdout.write(str(answer.get("output", "")))
    sys.stdout.flush()
    raise typer.Exit(int(answer.get("exitCode", 1)))
