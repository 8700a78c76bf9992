"""``chatmem maintain``: run a lifecycle job now over the chosen store (SPEC L5, L8, L10).

It runs the jobs of :mod:`chatmem.long_term.maintenance` directly on the store, with no lease: a
service on the same store may be running the same job meanwhile, which the decay sweep and
quotas tolerate (they re-read what they delete) but consolidation would do twice; use
``POST /v1/admin/maintenance/{job}`` against a running service instead.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from chatmem.cli.console import out, print_json
from chatmem.cli.options import given
from chatmem.cli.store import open_memory
from chatmem.long_term.decay import DEFAULT_THRESHOLD
from chatmem.long_term.maintenance import Job, JobOptions, JobReport, run_job

JobUserOption = Annotated[str | None, typer.Option("--user", "-u", help="Only this user.")]
JobTenantOption = Annotated[
    str | None, typer.Option("--tenant", "-t", help="The tenant (default: chatmem --tenant).")
]
JobJsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a line.")]

#: ``chatmem maintain``: its commands are added below.
maintain_app = typer.Typer(
    help="Run a lifecycle job now: decay (with TTL expiry), quota, consolidate, reflect.",
    no_args_is_help=True,
)


def summary(report: JobReport) -> str:
    """One line for people: what the job did, where."""
    if report.skipped:
        return f"{report.job.value}: skipped: {report.skipped}"
    counts = ", ".join(f"{n} {name}" for name, n in report.counts.items()) or "nothing to do"
    users = f", {report.users} user(s)" if report.users else ""
    where = f"tenant {', '.join(report.tenants)}{users}"
    return f"{report.job.value} ({where}): {counts} in {report.took_ms} ms"


def _run(job: Job, user: str | None, tenant_id: str | None, as_json: bool, **opts: Any) -> None:
    with open_memory() as opened:
        report = run_job(
            opened, job, [tenant_id or given.tenant], user_id=user, options=JobOptions(**opts)
        )
    if as_json:
        from chatmem.server.maintenance import report_json

        print_json(report_json(report))
    else:
        out.print(summary(report))


@maintain_app.command()
def decay(
    user: JobUserOption = None,
    tenant_id: JobTenantOption = None,
    threshold: Annotated[
        float, typer.Option(help="Delete memories whose decay score is under this.")
    ] = DEFAULT_THRESHOLD,
    as_json: JobJsonFlag = False,
) -> None:
    """Delete expired memories (TTL), rescore the rest, delete those under THRESHOLD."""
    _run(Job.DECAY, user, tenant_id, as_json, decay_threshold=threshold)


@maintain_app.command()
def quota(
    limit: Annotated[int, typer.Option(help="Most memories a user keeps.", min=0)],
    user: JobUserOption = None,
    tenant_id: JobTenantOption = None,
    as_json: JobJsonFlag = False,
) -> None:
    """Keep each user at LIMIT memories, deleting the lowest-scoring (pinned stay)."""
    _run(Job.QUOTA, user, tenant_id, as_json, max_memories_per_user=limit)


@maintain_app.command()
def consolidate(
    user: JobUserOption = None, tenant_id: JobTenantOption = None, as_json: JobJsonFlag = False
) -> None:
    """Merge each cluster of related memories into one summary (no LLM: extractive)."""
    _run(Job.CONSOLIDATE, user, tenant_id, as_json)


@maintain_app.command()
def reflect(
    user: JobUserOption = None, tenant_id: JobTenantOption = None, as_json: JobJsonFlag = False
) -> None:
    """Turn recurring patterns of memories into insights (reflective memories)."""
    _run(Job.REFLECT, user, tenant_id, as_json)


__all__ = ["consolidate", "decay", "maintain_app", "quota", "reflect", "summary"]
