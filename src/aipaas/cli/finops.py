"""FinOps commands: ``usage`` (cost and hours in a window, by any dimension), ``statement``
(a tenant's month, JSON or CSV), ``prices`` (the tenant's price view) and ``budgets`` (where each
budget stands)."""

from __future__ import annotations

import csv
import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from aipaas.cli import columns, failure

Tenant = Annotated[str | None, typer.Option("--tenant", "-t", help="Tenant (admins).")]
Output = Annotated[str, typer.Option("--output", "-o", help="table, json or csv.")]
ViewOutput = Annotated[str, typer.Option("--output", "-o", help="table or json.")]
_NUMBERS = (
    ("GPU-HOURS", "gpuHours"),
    ("CPU-HOURS", "cpuHours"),
    ("MEM GIB-HOURS", "memoryGiBHours"),
    ("COST", "cost"),
    ("CURRENCY", "currency"),
    ("TASKS", "tasks"),
)


def register(app: typer.Typer) -> None:
    app.command("usage")(usage)
    app.command("statement")(statement)
    app.command("prices")(prices)
    app.command("invite")(invite)
    app.command("redeem")(redeem)
    _columns()


def _columns() -> None:
    """`aipaas get budgets|pricelists|invitations|webhookdeliveries` tables."""
    meta, spec, status = columns.meta, columns.spec, columns.status
    columns.register(
        "Budget",
        [
            ("NAME", meta("name")),
            ("QUEUE", lambda o: o["spec"].get("queue") or "(tenant)"),
            ("AMOUNT", lambda o: f"{o['spec']['amount']:g} {o['spec']['currency']}"),
            ("PERIOD", spec("period")),
            ("SPENT", lambda o: f"{o['status']['spent']:.2f}"),
            ("FORECAST", lambda o: f"{o['status']['forecast']:.2f}"),
            ("CROSSED", lambda o: ",".join(f"{p:g}%" for p in o["status"]["crossed"])),
            ("ACTIONS", lambda o: ",".join(o["status"]["actions"])),
            (
                "THRESHOLDS",
                lambda o: ",".join(_threshold(t) for t in o["spec"]["thresholds"]),
                True,
            ),
        ],
    )
    columns.register(
        "PriceList",
        [
            ("NAME", meta("name")),
            ("FROM", spec("validFrom")),
            ("UNTIL", spec("validUntil")),
            ("CURRENCY", spec("currency")),
            ("TENANTS", lambda o: ",".join(o["spec"]["tenants"]) or "(all)"),
            (
                "GPU/H",
                lambda o: ",".join(f"{g['model']}={g['pricePerHour']:g}" for g in o["spec"]["gpu"]),
            ),
        ],
    )
    columns.register(
        "Invitation",
        [
            ("NAME", meta("name")),
            ("USER", spec("user")),
            ("ROLE", spec("role")),
            ("PHASE", status("phase")),
            ("EXPIRES", status("expiresAt")),
            ("AGE", columns.age),
        ],
    )
    columns.register(
        "WebhookDelivery",
        [
            ("NAME", meta("name")),
            ("EVENT", spec("event")),
            ("SOURCE", spec("source")),
            ("PHASE", status("phase", "Pending")),
            ("ATTEMPTS", status("attempts", 0)),
            ("LAST ERROR", status("lastError")),
            ("URL", spec("url"), True),
        ],
    )


def _threshold(threshold: dict[str, Any]) -> str:
    action = threshold.get("action", "notify")
    return f"{threshold['percent']:g}%" + ("" if action == "notify" else f":{action}")


def _check_output(output: str, allowed: tuple[str, ...] = ("table", "json", "csv")) -> None:
    if output not in allowed:
        failure.fail(f"--output must be {' or '.join(allowed)}, not {output!r}")


def usage(
    since: Annotated[
        str | None, typer.Option(help="From: RFC 3339 time, date, or ago (7d). This month.")
    ] = None,
    until: Annotated[str | None, typer.Option(help="Until (exclusive); now if unset.")] = None,
    by: Annotated[
        str, typer.Option(help="tenant|queue|user|job|model|day|pool|tier, comma-separated.")
    ] = "tenant,queue,user,model",
    tenant: Tenant = None,
    output: Output = "table",
) -> None:
    """Usage and cost (the usage ledger at the prices valid when it ran)."""
    _check_output(output)
    with failure.client() as client:
        answer = client.cost(since=since, until=until, by=by, tenant=tenant)
    dims = [str(d) for d in answer["by"]]
    rows: list[dict[str, Any]] = answer["items"]
    if output == "json":
        print(json.dumps(answer, indent=2))
    elif output == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([*dims, *(key for _, key in _NUMBERS)])
        for row in rows:
            writer.writerow([*(row[d] for d in dims), *(row[key] for _, key in _NUMBERS)])
    else:
        table = Table(box=None)
        for column in (*(d.upper() for d in dims), *(title for title, _ in _NUMBERS)):
            table.add_column(column)
        for row in rows:
            table.add_row(*(str(row[d]) or "-" for d in dims), *_numbers(row))
        for currency, amount in answer["total"].items():
            table.add_row("TOTAL", *[""] * (len(dims) + 2), f"{amount:.2f}", currency or "-", "")
        Console(width=200).print(table)


def _numbers(row: dict[str, Any]) -> list[str]:
    return [
        f"{row['gpuHours']:.3f}",
        f"{row['cpuHours']:.3f}",
        f"{row['memoryGiBHours']:.3f}",
        f"{row['cost']:.2f}",
        row["currency"] or "-",
        str(row["tasks"]),
    ]


def statement(
    tenant: Annotated[str | None, typer.Argument(help="Tenant; yours if unset.")] = None,
    month: Annotated[str | None, typer.Option(help="YYYY-MM; this month if unset.")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="json or csv.")] = "csv",
) -> None:
    """A tenant's monthly statement: lines by queue, user, GPU model, pool and tier."""
    _check_output(output, ("json", "csv"))
    with failure.client() as client:
        name = tenant or client.whoami().get("tenant") or ""
        if not name:
            failure.fail("name a tenant: a platform admin has none of its own")
        body = client.statement(name, month, output)
    if output == "csv":
        sys.stdout.write(str(body))
    else:
        print(json.dumps(body, indent=2))


def prices(tenant: Tenant = None, output: ViewOutput = "table") -> None:
    """The price lists that price the tenant's use, and the one in force now."""
    _check_output(output, ("table", "json"))
    with failure.client() as client:
        view = client.prices(tenant)
    if output == "json":
        print(json.dumps(view, indent=2))
        return
    table = Table(box=None)
    for column in ("NAME", "IN FORCE", "FROM", "UNTIL", "CURRENCY", "GPU/H", "CPU/H", "GIB/H"):
        table.add_column(column)
    for item in view["items"]:
        spec = item["spec"]
        gpu = ", ".join(f"{g['model']}={g['pricePerHour']:g}" for g in spec.get("gpu", []))
        table.add_row(
            item["metadata"]["name"],
            "yes" if item["metadata"]["name"] == view["inForce"] else "",
            spec["validFrom"],
            spec.get("validUntil") or "-",
            spec["currency"],
            gpu or "-",
            f"{spec['cpuCoreHour']:g}",
            f"{spec['memoryGiBHour']:g}",
        )
    Console(width=200).print(table)


def invite(
    user: Annotated[str, typer.Argument(help="The new user's name.")],
    role: Annotated[str, typer.Option(help="member, viewer or tenant-admin.")] = "member",
    email: Annotated[str | None, typer.Option(help="Who it is for.")] = None,
    expires_in: Annotated[str, typer.Option(help="How long it may be redeemed (7d).")] = "7d",
    tenant: Tenant = None,
) -> None:
    """Invite a user to the tenant: prints a one-time token to hand to them (shown once)."""
    body: dict[str, Any] = {
        "apiVersion": "aipaas/v1",
        "kind": "Invitation",
        "metadata": {"name": f"invite-{user}"[:63], **({"tenant": tenant} if tenant else {})},
        "spec": {"user": user, "role": role, "expiresIn": expires_in},
    }
    if email:
        body["spec"]["email"] = email
    with failure.client() as client:
        made = client.invite(body)
    expires = made["invitation"].get("status", {}).get("expiresAt", "")
    print(f"invitation/{made['invitation']['metadata']['name']} created (expires {expires})")
    print(f"token: {made['token']}")
    print(f"the invitee runs: aipaas redeem {made['token']}")


def redeem(
    token: Annotated[str, typer.Argument(help="The invitation token (aipinv_...).")],
) -> None:
    """Redeem an invitation: creates your user and prints your bearer token (shown once)."""
    with failure.client() as client:
        done = client.redeem(token)
    print(f"user {done['user']} ({done['role']}) created in tenant {done['tenant']}")
    print(f"token: {done['token']}")
