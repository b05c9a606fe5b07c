"""Shell completion of kinds and names (`aipaas --install-completion` sets it up for bash, zsh,
fish or PowerShell). Names come from the API with the user's own URL and token; a completer
that cannot ask it (no server, no token, a slow answer) offers nothing and says nothing: a
completion never prints an error into the command line being typed."""

from __future__ import annotations

from typing import Any

import httpx
import typer

from aipaas.api.registry import KINDS, resolve_kind
from aipaas.client import Client

TIMEOUT_SECONDS = 2.0


def kind_words() -> list[str]:
    words = {"devices"}
    for kind, cls in KINDS.items():
        words.update({kind.lower(), cls.plural})
    return sorted(w for w in words if w)


def kinds(incomplete: str) -> list[str]:
    """Kinds, as `get` takes them (job, jobs, queue...), and KIND/NAME once a slash is typed."""
    if "/" in incomplete:
        kind, _, prefix = incomplete.partition("/")
        return [f"{kind}/{name}" for name in _names(kind, prefix, None)]
    return [word for word in kind_words() if word.startswith(incomplete)]


def names(ctx: typer.Context, incomplete: str) -> list[str]:
    """Names of objects of the kind typed before (`aipaas get jobs <TAB>`)."""
    kind = str(ctx.params.get("kind") or ctx.params.get("target") or "job")
    taken = set(ctx.params.get("names") or [])
    found = _names(kind.partition("/")[0], incomplete, ctx.params.get("tenant"))
    return [name for name in found if name not in taken]


def jobs(ctx: typer.Context, incomplete: str) -> list[str]:
    """Job targets (`job/NAME`, or a bare NAME when that is being typed)."""
    kind, slash, prefix = incomplete.partition("/")
    tenant = ctx.params.get("tenant")
    if slash:
        return [f"{kind}/{name}" for name in _names(kind or "job", prefix, tenant)]
    return _names("job", incomplete, tenant)


def targets(ctx: typer.Context, incomplete: str) -> list[str]:
    """`delete`/`cancel`/`wait` targets: KIND/NAME; after a bare KIND, its names; first, the
    kinds and (a job being the default kind) job names."""
    tenant = ctx.params.get("tenant")
    given = [str(word) for word in ctx.params.get("targets") or []]
    if "/" in incomplete:
        kind, _, prefix = incomplete.partition("/")
        offered = [f"{kind}/{name}" for name in _names(kind, prefix, tenant)]
        return [target for target in offered if target not in given]
    if not given:
        kinds_offered = [w for w in kind_words() if w.startswith(incomplete)]
        return kinds_offered + _names("job", incomplete, tenant)
    first = given[0]
    if "/" in first:
        kind = first.partition("/")[0]
        return [
            f"{kind}/{n}" for n in _names(kind, incomplete, tenant) if f"{kind}/{n}" not in given
        ]
    kind = first if first.lower() in kind_words() else "job"
    return [n for n in _names(kind, incomplete, tenant) if n not in given]


def tenants(incomplete: str) -> list[str]:
    return _names("tenant", incomplete, None)


def _names(kind: str, prefix: str, tenant: Any) -> list[str]:
    try:
        resolve_kind(kind)
        with Client.from_env() as api:
            api.http.timeout = httpx.Timeout(TIMEOUT_SECONDS)
            items = api.list(kind, str(tenant) if tenant else None)
    except Exception:  # anything at all: a completion stays quiet
        return []
    found = {str(item["metadata"]["name"]) for item in items}
    return sorted(name for name in found if name.startswith(prefix))
