"""The service's lifecycle jobs on a schedule (config ``maintenance``), one replica at a time.

:class:`Maintenance` belongs to the ``Runtime``: a background thread that wakes every
``tick_s``, and for each scheduled job that is due takes its lease
(:mod:`chatmem.server.leases`), runs it over every tenant
(:func:`chatmem.long_term.maintenance.run_job`)
and releases it with the next due time, ``interval`` after the run's start. A job that
raises is logged and tried again at its next interval. While a job runs its lease is
renewed between users; a lease lost (this replica stalled past ``lease_minutes``, and
another took the job) stops the run after the user in hand.

``run_now`` runs one job at once (the admin API) under the same lease, so it never overlaps
a scheduled run on any replica; it leaves the schedule as it was.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chatmem.errors import ChatmemError, ConflictError
from chatmem.llm.base import ChatModel, ModelRole
from chatmem.long_term import LongTermMemory
from chatmem.long_term.maintenance import Job, JobOptions, JobReport, run_job
from chatmem.messages import now_ms
from chatmem.server.config import MaintenanceSection
from chatmem.server.leases import JobLeases, LocalLeases, PostgresLeases, SQLiteLeases

if TYPE_CHECKING:
    from chatmem.server.runtime import Runtime

logger = logging.getLogger("chatmem.server.maintenance")

#: Bounds of how often the scheduler looks for due jobs, in seconds.
MIN_TICK_S, MAX_TICK_S = 0.05, 30.0


def report_json(report: JobReport) -> dict[str, Any]:
    """A report as the admin API and the CLI show it."""
    return {**asdict(report), "job": report.job.value}


class Maintenance:
    """Runs the lifecycle jobs of one replica; see the module docstring."""

    def __init__(
        self,
        long_term: LongTermMemory,
        leases: JobLeases,
        settings: MaintenanceSection,
        tenants: Callable[[], list[str]],
        *,
        model: ChatModel | None = None,
        holder: str | None = None,
    ) -> None:
        self.long_term = long_term
        self.leases = leases
        self.settings = settings
        self.tenants = tenants
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.options = JobOptions(
            decay_threshold=settings.decay_threshold,
            max_memories_per_user=settings.max_memories_per_user,
            model=model,
        )
        self.intervals_s = {Job(name): s for name, s in settings.intervals_s().items()}
        shortest = min(self.intervals_s.values(), default=MAX_TICK_S)
        self.tick_s = max(MIN_TICK_S, min(MAX_TICK_S, shortest / 4))
        self._lease_ms = round(settings.lease_minutes * 60_000)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the schedule ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the scheduler thread (nothing runs when no job has an interval)."""
        if not self.settings.enabled or not self.intervals_s:
            return
        self._thread = threading.Thread(target=self._loop, name="chatmem-maintenance", daemon=True)
        self._thread.start()
        logger.info(
            "maintenance scheduled: %s",
            ", ".join(f"{job.value} every {s:g} s" for job, s in self.intervals_s.items()),
        )

    def _loop(self) -> None:
        while not self._stopping.wait(self.tick_s):
            for job, interval_s in self.intervals_s.items():
                if self._stopping.is_set():
                    return
                self.run_due(job, interval_s)

    def run_due(self, job: Job, interval_s: float) -> JobReport | None:
        """Run ``job`` if it is due and no replica holds it; None when it was not run (or
        failed: logged, and tried again at its next interval)."""
        started = now_ms()
        try:
            if not self.leases.claim(
                job.value, self.holder, started, self._lease_ms, due_only=True
            ):
                return None
            return self._run(job, None, None, next_due_ms=started + round(interval_s * 1000))
        except Exception:  # boundary: one failed run must not end the schedule
            logger.exception("maintenance %s failed", job.value)
            return None

    def stop(self) -> None:
        """Stop the thread after the user in hand (waits for it), then close the leases."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(60)
        self.leases.close()

    # -- running -------------------------------------------------------------------------------

    def run_now(
        self, job: Job, *, tenant_id: str | None = None, user_id: str | None = None
    ) -> JobReport:
        """Run ``job`` at once (every tenant, or ``tenant_id``; every user, or ``user_id``);
        ConflictError while a replica runs it."""
        if not self.leases.claim(job.value, self.holder, now_ms(), self._lease_ms, due_only=False):
            raise ConflictError(f"maintenance job {job.value!r} is running on another replica")
        return self._run(job, tenant_id, user_id, next_due_ms=None)

    def _run(
        self, job: Job, tenant_id: str | None, user_id: str | None, next_due_ms: int | None
    ) -> JobReport:
        """Run ``job`` under the lease this replica just took, then release it with the
        run's result (or its error)."""
        result: dict[str, Any] = {"job": job.value, "error": "interrupted"}
        try:
            tenants = [tenant_id] if tenant_id is not None else self.tenants()
            report = run_job(
                self.long_term,
                job,
                tenants,
                user_id=user_id,
                options=self.options,
                stop=self._keep_going(job),
            )
            result = report_json(report)
            return report
        except Exception as exc:  # boundary: note the failure in the lease row, re-raise
            result = {"job": job.value, "error": f"{type(exc).__name__}: {exc}"}
            raise
        finally:
            self._release(job, next_due_ms, result)

    def _release(self, job: Job, next_due_ms: int | None, result: dict[str, Any]) -> None:
        try:
            self.leases.release(job.value, self.holder, now_ms(), next_due_ms, json.dumps(result))
        except Exception:  # boundary: the lease runs out by itself after lease_minutes
            logger.exception("maintenance %s: the lease could not be released", job.value)

    def _keep_going(self, job: Job) -> Callable[[], bool]:
        """What a run asks between users: stop when the service stops or the lease is lost;
        the lease is renewed once half of it has passed."""
        renewed = [time.monotonic()]

        def stop() -> bool:
            if self._stopping.is_set():
                return True
            if (time.monotonic() - renewed[0]) * 1000 < self._lease_ms / 2:
                return False
            renewed[0] = time.monotonic()
            if self.leases.renew(job.value, self.holder, now_ms() + self._lease_ms):
                return False
            logger.warning("maintenance %s: lease lost to another replica; stopping", job.value)
            return True

        return stop


def service_tenants(runtime: Runtime) -> list[str]:
    """The tenants a service knows: those of its keys, the anonymous one and "default"."""
    tenants = {info.tenant_id for info in runtime.keys.keys(tenant_id=None)}
    tenants.add(runtime.config.auth.anonymous_tenant or "default")
    tenants.add("default")
    return sorted(tenants)


def leases_for(runtime: Runtime, database: Path | None) -> JobLeases:
    """Where this service keeps its leases: the shared PostgreSQL state, else the data
    dir's ``service.db``, else memory."""
    if runtime.shared_state is not None:
        return PostgresLeases(runtime.shared_state.database)
    return SQLiteLeases(database) if database is not None else LocalLeases()


def start_maintenance(runtime: Runtime, database: Path | None) -> Maintenance | None:
    """The runtime's scheduler, started; None when memory is off or its leases cannot be
    opened (logged: the service runs on without scheduled jobs)."""
    if runtime.long_term is None:
        return None
    try:
        leases = leases_for(runtime, database)
    except ChatmemError as exc:
        logger.error("maintenance off: its leases cannot be opened: %s", exc)
        return None
    maintenance = Maintenance(
        runtime.long_term,
        leases,
        runtime.config.maintenance,
        lambda: service_tenants(runtime),
        model=runtime.models.get(ModelRole.SUMMARIZATION),
    )
    maintenance.start()
    return maintenance


__all__ = [
    "Maintenance",
    "leases_for",
    "report_json",
    "service_tenants",
    "start_maintenance",
]
