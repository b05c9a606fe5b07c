"""``$(VAR)`` in a task's command, expanded as Kubernetes expands a container's command and args.

The controller expands a task's command with the job's env and the platform's variables
(controller/launch.py) for the backends that keep those variables as they are. A backend that
changes one before the task starts expands the command itself afterwards, so the command says
what the environment says: Slurm and Ray put a node's address in MASTER_ADDR where the
controller wrote its name (``--master-addr=$(MASTER_ADDR)`` must reach the address); on
Kubernetes the kubelet expands it. Pure; who calls it: controller/launch.py and the Slurm and
Ray backends' starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def expand_command(command: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """Every argument of ``command`` expanded with ``env``."""
    return tuple(expand(part, env) for part in command)


def expand(text: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` replaced by ``env[VAR]`` as Kubernetes expands a container's command and
    args: ``$$`` is one ``$`` (so ``$$(VAR)`` stays ``$(VAR)``), a name not in ``env`` and an
    unclosed ``$(`` stay as written; ``$VAR`` is not touched (a shell's business)."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "$" or index + 1 == len(text):
            out.append(char)
            index += 1
            continue
        following = text[index + 1]
        if following == "$":
            out.append("$")
            index += 2
        elif following == "(":
            close = text.find(")", index + 2)
            if close == -1:
                out.append("$(")
                index += 2
                continue
            name = text[index + 2 : close]
            out.append(env.get(name, f"$({name})"))
            index = close + 1
        else:
            out.append("$" + following)
            index += 2
    return "".join(out)
