"""The lifecycle jobs, run over whole tenants: the decay sweep and TTL expiry (SPEC L5),
quotas (L8), consolidation and reflection (L10).

Each job here is the library's own function (:mod:`chatmem.long_term.decay`,
:mod:`chatmem.long_term.consolidation`) applied to every user of the tenants given, or to one user.
Users come from ``MemoryStore.users``. A job checks ``stop`` between users, so a service
that is stopping (or a lease that was lost) ends it after the user in hand; what it did so
far is reported, with ``stopped`` set.

The service schedules these (:mod:`chatmem.server.maintenance`); ``chatmem maintain`` and
``POST /v1/admin/maintenance/{job}`` run one now.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from chatmem.errors import ValidationError
from chatmem.llm.base import ChatModel
from chatmem.long_term.consolidation import consolidate, reflect
from chatmem.long_term.decay import DEFAULT_THRESHOLD, SweepReport, enforce_quota, sweep_decay
from chatmem.long_term.facade import LongTermMemory

logger = logging.getLogger("chatmem.maintenance")

#: Users read per page while a job walks a tenant.
USER_PAGE = 500


class Job(StrEnum):
    """A lifecycle job."""

    DECAY = "decay"
    QUOTA = "quota"
    CONSOLIDATE = "consolidate"
    REFLECT = "reflect"


@dataclass(frozen=True)
class JobOptions:
    """How the jobs judge memories: the decay threshold, the quota (None: no quota) and
    the model that words summaries and insights (None: extractive, no LLM call)."""

    decay_threshold: float = DEFAULT_THRESHOLD
    max_memories_per_user: int | None = None
    model: ChatModel | None = None


@dataclass
class JobReport:
    """What one run of a job did. ``counts`` by job: decay ``expired``, ``scanned``,
    ``rescored``, ``deleted``, ``pinned``; quota ``deleted``; consolidate ``summaries``;
    reflect ``insights``. ``skipped`` says why nothing ran."""

    job: Job
    tenants: list[str]
    users: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    took_ms: int = 0
    stopped: bool = False
    skipped: str | None = None

    def add(self, name: str, n: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + n


def run_job(
    long_term: LongTermMemory,
    job: Job,
    tenants: Sequence[str],
    *,
    user_id: str | None = None,
    options: JobOptions = JobOptions(),
    stop: Callable[[], bool] = lambda: False,
) -> JobReport:
    """Run ``job`` over ``tenants`` (every user of each, or only ``user_id``)."""
    began = time.monotonic()
    report = JobReport(job=job, tenants=sorted(set(tenants)))
    if job is Job.QUOTA and options.max_memories_per_user is None:
        report.skipped = "no quota is configured (maintenance.max_memories_per_user)"
        return report
    for tenant in report.tenants:
        if job is Job.DECAY:
            _decay(long_term, tenant, user_id, options, report)
        else:
            _per_user(
                long_term, job, tenant, _users(long_term, tenant, user_id), options, report, stop
            )
        if stop():
            report.stopped = True
            break
    report.took_ms = round((time.monotonic() - began) * 1000)
    logger.info(
        "maintenance %s: %d tenant(s), %d user(s), %s in %d ms%s",
        job.value,
        len(report.tenants),
        report.users,
        report.counts,
        report.took_ms,
        " (stopped)" if report.stopped else "",
    )
    return report


def _decay(
    long_term: LongTermMemory,
    tenant: str,
    user_id: str | None,
    options: JobOptions,
    report: JobReport,
) -> None:
    swept: SweepReport = sweep_decay(
        long_term, tenant_id=tenant, user_id=user_id, threshold=options.decay_threshold
    )
    for name in ("expired", "scanned", "rescored", "deleted", "pinned"):
        report.add(name, getattr(swept, name))


def _per_user(
    long_term: LongTermMemory,
    job: Job,
    tenant: str,
    users: Iterable[str],
    options: JobOptions,
    report: JobReport,
    stop: Callable[[], bool],
) -> None:
    for user in users:
        if stop():
            report.stopped = True
            return
        report.users += 1
        if job is Job.QUOTA:
            assert options.max_memories_per_user is not None
            gone = enforce_quota(
                long_term, user_id=user, tenant_id=tenant, limit=options.max_memories_per_user
            )
            report.add("deleted", len(gone))
        elif job is Job.CONSOLIDATE:
            made = consolidate(long_term, user, tenant_id=tenant, model=options.model)
            report.add("summaries", len(made))
        elif job is Job.REFLECT:
            made = reflect(long_term, user, tenant_id=tenant, model=options.model)
            report.add("insights", len(made))


def _users(long_term: LongTermMemory, tenant: str, user_id: str | None) -> Iterator[str]:
    """``user_id`` alone, else every user of ``tenant``, a page at a time."""
    if user_id is not None:
        yield user_id
        return
    after: str | None = None
    while True:
        page = long_term.store.users(tenant, after=after, limit=USER_PAGE)
        yield from page
        if len(page) < USER_PAGE:
            return
        after = page[-1]


def parse_job(name: str) -> Job:
    """The job named ``name``; a ValidationError naming the jobs otherwise."""
    try:
        return Job(name)
    except ValueError:
        names = ", ".join(j.value for j in Job)
        raise ValidationError(f"unknown job {name!r} ({names})", field="job") from None


__all__ = ["USER_PAGE", "Job", "JobOptions", "JobReport", "parse_job", "run_job"]
