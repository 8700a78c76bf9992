"""``chatmem maintain``: run a lifecycle job now over the chosen store (SPEC L5, L8, L10).

The command group of :mod:`chatmem.cli`, kept apart so the CLI module stays one screenful
per concern. It runs the jobs of :mod:`chatmem.maintenance` directly on the store, with no
lease: a service on the same store may be running the same job meanwhile, which the decay
sweep and quotas tolerate (they re-read what they delete) but consolidation would do twice;
use ``POST /v1/admin/maintenance/{job}`` against a running service instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from chatmem.decay import DEFAULT_THRESHOLD
from chatmem.errors import ValidationError
from chatmem.long_term import LongTermMemory
from chatmem.maintenance import Job, JobOptions, JobReport, run_job
from chatmem.records import utcnow

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhd])", re.ASCII)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}

OpenMemory = Callable[[], AbstractContextManager[LongTermMemory]]

UserOption = Annotated[str | None, typer.Option("--user", "-u", help="Only this user.")]
TenantOption = Annotated[
    str | None, typer.Option("--tenant", "-t", help="The tenant (default: chatmem --tenant).")
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a line.")]


def expiry(value: str) -> datetime:
    """``--expires``: an ISO 8601 time (UTC unless it names a zone), or a duration from now
    (``90s``, ``30m``, ``12h``, ``7d``)."""
    text = value.strip()
    if matched := _DURATION.fullmatch(text):
        amount, unit = matched.groups()
        return utcnow() + timedelta(**{_UNITS[unit]: float(amount)})
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(
            "is neither an ISO 8601 time nor a duration (90s, 30m, 12h, 7d)", field="--expires"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def summary(report: JobReport) -> str:
    """One line for people: what the job did, where."""
    if report.skipped:
        return f"{report.job.value}: skipped: {report.skipped}"
    counts = ", ".join(f"{n} {name}" for name, n in report.counts.items()) or "nothing to do"
    users = f", {report.users} user(s)" if report.users else ""
    where = f"tenant {', '.join(report.tenants)}{users}"
    return f"{report.job.value} ({where}): {counts} in {report.took_ms} ms"


def command(
    memory: OpenMemory,
    tenant: Callable[[], str],
    show: Callable[[str], Any],
    show_json: Callable[[Any], None],
) -> typer.Typer:
    """The ``maintain`` group over the CLI's store opener, tenant and output doors."""
    group = typer.Typer(
        help="Run a lifecycle job now: decay (with TTL expiry), quota, consolidate, reflect.",
        no_args_is_help=True,
    )

    def run(job: Job, user: str | None, tenant_id: str | None, as_json: bool, **opts: Any) -> None:
        with memory() as opened:
            report = run_job(
                opened, job, [tenant_id or tenant()], user_id=user, options=JobOptions(**opts)
            )
        if as_json:
            from chatmem.server.maintenance import report_json

            show_json(report_json(report))
        else:
            show(summary(report))

    @group.command()
    def decay(
        user: UserOption = None,
        tenant_id: TenantOption = None,
        threshold: Annotated[
            float, typer.Option(help="Delete memories whose decay score is under this.")
        ] = DEFAULT_THRESHOLD,
        as_json: JsonFlag = False,
    ) -> None:
        """Delete expired memories (TTL), rescore the rest, delete those under THRESHOLD."""
        run(Job.DECAY, user, tenant_id, as_json, decay_threshold=threshold)

    @group.command()
    def quota(
        limit: Annotated[int, typer.Option(help="Most memories a user keeps.", min=0)],
        user: UserOption = None,
        tenant_id: TenantOption = None,
        as_json: JsonFlag = False,
    ) -> None:
        """Keep each user at LIMIT memories, deleting the lowest-scoring (pinned stay)."""
        run(Job.QUOTA, user, tenant_id, as_json, max_memories_per_user=limit)

    @group.command()
    def consolidate(
        user: UserOption = None, tenant_id: TenantOption = None, as_json: JsonFlag = False
    ) -> None:
        """Merge each cluster of related memories into one summary (no LLM: extractive)."""
        run(Job.CONSOLIDATE, user, tenant_id, as_json)

    @group.command()
    def reflect(
        user: UserOption = None, tenant_id: TenantOption = None, as_json: JsonFlag = False
    ) -> None:
        """Turn recurring patterns of memories into insights (reflective memories)."""
        run(Job.REFLECT, user, tenant_id, as_json)

    return group


__all__ = ["command", "expiry", "summary"]
