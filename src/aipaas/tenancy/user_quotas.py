"""Per-user quotas inside a tenant: a User's ``spec.quota`` bounds what the jobs it submitted
(annotation ``aipaas.dev/submitted-by``) hold at once, checked at admission next to the tenant's
and the queue's quotas (controller/admission.py)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from aipaas.api.job import Job
from aipaas.api.resources import Quota
from aipaas.api.tenancy import User
from aipaas.metering.usage import SUBMITTER_ANNOTATION
from aipaas.store import Store
from aipaas.tenancy.quota import Usage, exceeded


@dataclass
class UserQuotas:
    #: (tenant, user) -> quota, for the users that have one
    quotas: dict[tuple[str, str], Quota] = field(default_factory=dict)
    used: dict[tuple[str, str], Usage] = field(default_factory=lambda: defaultdict(Usage))

    @classmethod
    def load(cls, store: Store) -> UserQuotas:
        users = store.list_objects("User", None)
        return cls(
            {
                (u.tenant, u.name): u.spec.quota
                for u in users
                if isinstance(u, User) and u.spec.quota is not None
            }
        )

    @staticmethod
    def _key(job: Job) -> tuple[str, str]:
        return job.tenant, job.metadata.annotations.get(SUBMITTER_ANNOTATION, "")

    def take(self, job: Job, used: Usage) -> None:
        """Count ``used`` against the job's submitter (held now, or placed this cycle)."""
        if self.quotas:
            self.used[self._key(job)] += used

    def why_not(self, job: Job, wanted: Usage) -> tuple[str, str] | None:
        key = self._key(job)
        quota = self.quotas.get(key)
        if quota is None:
            return None
        why = exceeded(quota, self.used[key], wanted)
        return None if why is None else ("QuotaExceeded", f"user {key[1]} quota: {why}")
