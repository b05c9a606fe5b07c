"""PriceList, Budget and Invitation (issue 15: tenant admins and FinOps).

- PriceList (cluster-wide, written by platform admins, read by tenants): prices per GPU-hour of
  a GPU model, per CPU core-hour and GiB-hour of memory, with factors per node pool and per
  priority class (a tier such as ``spot``), valid from ``validFrom`` until ``validUntil``. A
  list naming ``tenants`` is those tenants' own (negotiated) prices and wins over the general
  ones; a tenant sees only the general lists and its own.
- Budget (in a tenant): an amount per period for the tenant or one queue, with thresholds in
  percent; each threshold notifies (an event, a signed webhook) and may stop admission or lower
  the queue's priority tier. The controller writes its status (controller/budgets.py).
- Invitation (in a tenant): a one-time token that creates a user of the tenant when redeemed.

Pure: no I/O. The rules that need the store live in metering/ and tenancy/.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from aipaas.api.duration import PositiveDuration
from aipaas.api.meta import LenientModel, Model, Name, Object
from aipaas.api.queue import Queue, QueueSpec, raise_at

MAX_PRICE: Final = 1e9
MAX_AMOUNT: Final = 1e12
ANY_MODEL: Final = "*"
#: system annotations the budget controller sets on a Queue (or Tenant) and admission reads
ADMISSION_STOPPED: Final = "aipaas.dev/admission-stopped"
PRIORITY_LOWERED: Final = "aipaas.dev/priority-lowered"
#: the queue priority (among siblings) a lowered queue gets: below every other
LOWERED_QUEUE_PRIORITY: Final = -1_000_000


def parse_moment(value: Any) -> Any:
    """An RFC 3339 time or a date (midnight UTC); kept as an aware datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError as err:
            raise ValueError(
                f"{value!r} is not a time: use RFC 3339 (2026-11-01T00:00:00Z) or a date"
            ) from err
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise ValueError("must be an RFC 3339 time or a date")


Moment = Annotated[datetime, BeforeValidator(parse_moment)]


def _price(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


Price = Annotated[float, Field(ge=0, le=MAX_PRICE), AfterValidator(_price)]
Factor = Annotated[float, Field(ge=0, le=1000), AfterValidator(_price)]


class GpuPrice(Model):
    """The price of one GPU-hour of ``model`` (``*``: every model no other entry names). A
    fraction of a GPU pays its share."""

    model: str = Field(min_length=1, max_length=64)
    price_per_hour: Price


class PriceListSpec(Model):
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    valid_from: Moment
    valid_until: Moment | None = None
    #: empty: prices of every tenant; else only of these (and they win over the general lists)
    tenants: list[Name] = Field(default_factory=list, max_length=256)
    gpu: list[GpuPrice] = Field(default_factory=list, max_length=256)
    cpu_core_hour: Price = 0.0
    memory_gib_hour: Price = Field(default=0.0, alias="memoryGiBHour")
    #: multiplies the price of work on nodes of a pool (label aipaas.dev/pool)
    pool_factors: dict[Name, Factor] = Field(default_factory=dict, max_length=256)
    #: multiplies the price of work of a priority class (a tier: spot, low, high...)
    tier_factors: dict[Name, Factor] = Field(default_factory=dict, max_length=256)

    @model_validator(mode="after")
    def _consistent(self) -> PriceListSpec:
        if self.valid_until is not None and self.valid_until <= self.valid_from:
            raise_at(
                "PriceListSpec", ("validUntil",), str(self.valid_until), "must be after validFrom"
            )
        seen: set[str] = set()
        for index, entry in enumerate(self.gpu):
            if entry.model in seen:
                raise_at(
                    "PriceListSpec", ("gpu", index, "model"), entry.model, "named twice in gpu"
                )
            seen.add(entry.model)
        return self

    def valid_at(self, moment: datetime) -> bool:
        return self.valid_from <= moment and (self.valid_until is None or moment < self.valid_until)

    def gpu_price(self, model: str) -> float:
        prices = {entry.model: entry.price_per_hour for entry in self.gpu}
        return prices.get(model, prices.get(ANY_MODEL, 0.0))


class PriceList(Object):
    namespaced: ClassVar[bool] = False
    plural: ClassVar[str] = "pricelists"

    kind: Literal["PriceList"] = "PriceList"
    spec: PriceListSpec
    status: LenientModel | None = None


BudgetAction = Literal["notify", "stopAdmission", "lowerPriority"]


class Threshold(Model):
    """At ``percent`` of the amount: notify, and take ``action`` (notify alone by default)."""

    percent: float = Field(gt=0, le=1000)
    action: BudgetAction = "notify"


def _threshold(value: Any) -> Any:
    # ``thresholds: [50, 80, {percent: 100, action: stopAdmission}]``: a bare number notifies.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"percent": value}
    return value


class SecretRef(Model):
    """A key of a Secret of the budget's tenant (the webhook's signing key)."""

    name: Name
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")


class Webhook(Model):
    url: str = Field(max_length=2048)
    secret_ref: SecretRef

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value


class BudgetSpec(Model):
    #: None: the whole tenant's spend; else one queue's
    queue: Name | None = None
    amount: float = Field(gt=0, le=MAX_AMOUNT)
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    period: Literal["daily", "weekly", "monthly"] = "monthly"
    thresholds: list[Annotated[Threshold, BeforeValidator(_threshold)]] = Field(
        default_factory=lambda: [
            Threshold(percent=50),
            Threshold(percent=80),
            Threshold(percent=100),
        ],
        min_length=1,
        max_length=16,
    )
    webhook: Webhook | None = None

    @field_validator("amount")
    @classmethod
    def _finite(cls, value: float) -> float:
        return _price(value)

    @model_validator(mode="after")
    def _distinct(self) -> BudgetSpec:
        seen: set[float] = set()
        for index, threshold in enumerate(self.thresholds):
            if threshold.percent in seen:
                raise_at(
                    "BudgetSpec",
                    ("thresholds", index, "percent"),
                    threshold.percent,
                    f"{threshold.percent:g}% is named twice",
                )
            seen.add(threshold.percent)
        if self.queue is None:
            for index, threshold in enumerate(self.thresholds):
                if threshold.action == "lowerPriority":
                    raise_at(
                        "BudgetSpec",
                        ("thresholds", index, "action"),
                        threshold.action,
                        "lowerPriority needs a queue budget (spec.queue)",
                    )
        return self


class BudgetStatus(LenientModel):
    """Written by the controller (controller/budgets.py)."""

    period_start: str | None = None
    spent: float = 0.0
    forecast: float = 0.0
    percent: float = 0.0
    #: thresholds crossed in this period, in percent
    crossed: list[float] = Field(default_factory=list)
    #: actions in force (stopAdmission, lowerPriority)
    actions: list[str] = Field(default_factory=list)
    updated_at: str | None = None


class Budget(Object):
    plural: ClassVar[str] = "budgets"

    kind: Literal["Budget"] = "Budget"
    spec: BudgetSpec
    status: BudgetStatus | None = None


class InvitationSpec(Model):
    """Who the invitation makes: a user ``user`` of the tenant with ``role``."""

    user: Name
    role: Literal["tenant-admin", "member", "viewer"] = "member"
    email: str | None = Field(default=None, max_length=256)
    expires_in: PositiveDuration = "7d"


class InvitationStatus(LenientModel):
    phase: Literal["Pending", "Redeemed", "Expired"] = "Pending"
    expires_at: str | None = None
    redeemed_at: str | None = None


class Invitation(Object):
    plural: ClassVar[str] = "invitations"

    kind: Literal["Invitation"] = "Invitation"
    spec: InvitationSpec
    status: InvitationStatus | None = None


def effective_queue_spec(queue: Queue) -> QueueSpec:
    """The queue's spec as the queue tree uses it: a queue whose budget lowered its priority
    (annotation ``aipaas.dev/priority-lowered``) comes after all its siblings."""
    if not queue.metadata.annotations.get(PRIORITY_LOWERED):
        return queue.spec
    return queue.spec.model_copy(update={"priority": LOWERED_QUEUE_PRIORITY})


class WebhookDeliverySpec(Model):
    """One notification to send: ``event`` with ``payload`` (JSON) to ``url``, signed with the
    key ``secretRef`` names (a Secret of the tenant; none: a platform alert, signed with the
    server's alert key)."""

    url: str = Field(max_length=2048)
    secret_ref: SecretRef | None = None
    event: str = Field(max_length=128)
    #: the object the notification is about (a Budget, a Job, a Node)
    source: str = Field(default="", max_length=256)
    payload: dict[str, Any] = Field(default_factory=dict)


class WebhookDeliveryStatus(LenientModel):
    #: ``phase`` (not ``state``): the store indexes it, so pending deliveries are found cheaply
    phase: Literal["Pending", "Delivered", "Failed"] = "Pending"
    attempts: int = 0
    next_attempt_at: str | None = None
    last_code: int | None = None
    last_error: str | None = None
    delivered_at: str | None = None


class WebhookDelivery(Object):
    """The delivery log: one object per notification, written by the controller only; the name
    is derived from what is notified (a budget's threshold in one period), so a notification is
    entered once however often the controller sees it."""

    plural: ClassVar[str] = "webhookdeliveries"

    kind: Literal["WebhookDelivery"] = "WebhookDelivery"
    spec: WebhookDeliverySpec
    status: WebhookDeliveryStatus | None = None


FINOPS_KINDS: tuple[type[Object], ...] = (PriceList, Budget, Invitation, WebhookDelivery)
