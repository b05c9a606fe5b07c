"""Step 6, budgets: spend, forecast and threshold crossings of every Budget; their actions; the
webhooks of the delivery log.

Every ``interval`` seconds each budget's standing is computed (metering/budgets.py). A
threshold reached for the first time in the period is a crossing: in one fenced transaction
the budget's status records it, an event says so and, when the budget has a webhook, a
WebhookDelivery is entered under a name derived from the crossing (entered once, whatever
restarts happen). The actions of the crossed thresholds are kept in force as system
annotations of the queue or tenant (controller/budget_marks.py), which admission and the queue
tree read; a new period (or a deleted budget) lifts them. Pending deliveries are sent every
cycle that has some due, each on a thread of its own (metering/webhooks.py Courier).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from aipaas.api.data import Secret
from aipaas.api.finops import (
    Budget,
    BudgetStatus,
    SecretRef,
    Webhook,
    WebhookDelivery,
    WebhookDeliverySpec,
)
from aipaas.api.meta import ObjectMeta
from aipaas.clock import isoformat
from aipaas.controller import budget_marks
from aipaas.controller.extensions import CycleContext
from aipaas.metering.budgets import Standing, delivery_name, period_of, standing
from aipaas.metering.cost import CostRow
from aipaas.metering.cost_cache import CostCache
from aipaas.metering.webhooks import Courier, Sender, http_sender
from aipaas.settings import Settings
from aipaas.store import Connection, Store

log = logging.getLogger("aipaas.controller")


def budgets_extension(settings: Settings) -> BudgetExtension:
    key = settings.alert_webhook_secret
    return BudgetExtension(
        interval=settings.budget_interval_seconds,
        platform_key=key.encode() if key else None,
        allow_private=settings.webhook_allow_private,
    )


class BudgetExtension:
    name = "budgets"

    def __init__(
        self,
        interval: float = 30.0,
        sender: Sender = http_sender,
        platform_key: bytes | None = None,
        allow_private: bool = False,
    ) -> None:
        self.interval = interval
        self.sender = sender
        #: signs deliveries without a secretRef (platform alerts)
        self.platform_key = platform_key
        #: tenants' webhooks may go to internal addresses (metering/webhooks.py private_target)
        self.allow_private = allow_private
        self._last: float | None = None
        #: the priced ledger kept between evaluations (metering/cost_cache.py)
        self._costs = CostCache()
        #: sends the deliveries off the cycle's thread: a slow receiver never holds the loop
        self.courier = Courier()

    def run(self, context: CycleContext) -> None:
        now = context.clock.monotonic()
        if self._last is None or now - self._last >= self.interval:
            self._last = now
            self.evaluate(context)
        self.courier.run(
            context.store,
            lambda d: signing_key(context.store, d, self.platform_key),
            self.sender,
            context.transaction,
            allow_private=self.allow_private,
        )

    def evaluate(self, context: CycleContext) -> None:
        store = context.store
        budgets = [b for b in store.list_objects("Budget", None) if isinstance(b, Budget)]
        now = context.clock.now()
        by_tenant: dict[str, list[Budget]] = defaultdict(list)
        for budget in budgets:
            by_tenant[budget.tenant].append(budget)
        in_force: list[tuple[Budget, Standing]] = []
        for tenant, members in sorted(by_tenant.items()):
            since = min(period_of(b.spec.period, now).start for b in members)
            rows = self._costs.cost(store, tenant, since, now, ("queue", "day"))
            for budget in members:
                start = period_of(budget.spec.period, now).start
                mine = [r for r in rows if r.key["day"] >= start.date().isoformat()]
                now_standing = standing(budget, _by_queue(mine), now)
                self._record(context, budget, now_standing, now)
                in_force.append((budget, now_standing))
        budget_marks.reconcile(store, in_force)

    def _record(
        self, context: CycleContext, budget: Budget, now_standing: Standing, now: datetime
    ) -> None:
        status = budget.status or BudgetStatus()
        period_start = isoformat(now_standing.period.start)
        before = set(status.crossed) if status.period_start == period_start else set()
        new = [p for p in now_standing.crossed if p not in before]
        wanted = BudgetStatus(
            period_start=period_start,
            spent=now_standing.spent,
            forecast=now_standing.forecast,
            percent=now_standing.percent,
            crossed=sorted(before | set(now_standing.crossed)),
            actions=list(now_standing.actions),
            updated_at=status.updated_at,
        )
        if not new and _same(status, wanted):
            return
        wanted.updated_at = isoformat(now)
        store = context.store
        with context.transaction() as tx:
            store.write_status(budget, wanted, conn=tx)
            for percent in new:
                message = (
                    f"{percent:g}% of {budget.spec.amount:g} {budget.spec.currency} "
                    f"({budget.spec.period}, {now_standing.period.key}) reached: spent "
                    f"{now_standing.spent:g}, forecast {now_standing.forecast:g}"
                )
                store.record_event(
                    budget, "BudgetThresholdCrossed", message, warning=percent >= 100, conn=tx
                )
                if budget.spec.webhook is not None:
                    _enter_delivery(store, tx, budget, budget.spec.webhook, now_standing, percent)


def _enter_delivery(
    store: Store, tx: Connection, budget: Budget, webhook: Webhook, now: Standing, percent: float
) -> None:
    name = delivery_name(budget, now.period, percent)
    delivery = WebhookDelivery(
        metadata=ObjectMeta(name=name, tenant=budget.tenant),
        spec=WebhookDeliverySpec(
            url=webhook.url,
            secret_ref=webhook.secret_ref,
            event="BudgetThresholdCrossed",
            source=f"budget/{budget.name}",
            payload={
                "budget": budget.name,
                "queue": budget.spec.queue,
                "period": now.period.key,
                "threshold": percent,
                "amount": budget.spec.amount,
                "currency": budget.spec.currency,
                "spent": now.spent,
                "forecast": now.forecast,
                "actions": [t.action for t in budget.spec.thresholds if t.percent == percent],
            },
        ),
    )
    if store.find_each([("WebhookDelivery", budget.tenant, name)], conn=tx):
        return  # entered already (the status that said so was lost)
    store.create(delivery, conn=tx)


def _by_queue(rows: Sequence[CostRow]) -> list[CostRow]:
    """Rows by (queue, day) summed by queue (the day served to cut the period)."""
    summed: dict[tuple[str, str], CostRow] = {}
    for row in rows:
        key = (row.key["queue"], row.currency)
        target = summed.setdefault(key, CostRow({"queue": key[0]}, key[1]))
        target.cost += row.cost
    return list(summed.values())


def _same(old: BudgetStatus, new: BudgetStatus) -> bool:
    return old.model_dump(exclude={"updated_at"}) == new.model_dump(exclude={"updated_at"})


def signing_key(
    store: Store, delivery: WebhookDelivery, platform_key: bytes | None
) -> bytes | None:
    """The key a delivery is signed with: its Secret's, or the platform's for alerts."""
    ref: SecretRef | None = delivery.spec.secret_ref
    if ref is None:
        return platform_key
    secret = store.find("Secret", delivery.tenant, ref.name)
    if not isinstance(secret, Secret) or ref.key not in secret.spec.data:
        return None
    return secret.spec.data[ref.key].encode()
