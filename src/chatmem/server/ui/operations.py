"""Operations (issue 13, item 5): the extraction queue and the service's health.

A tenant key sees its own tenant's batches and may retry its dead ones. The service-wide
parts (every tenant's queue, key counts, store and embedder status, and the metrics of
``chatmem.server.metrics`` drawn as small charts) are shown to the admin, and to the
anonymous tenant of a service that requires no keys (whose ``/metrics`` is open anyway).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from prometheus_client.metrics import MetricWrapperBase

from chatmem.server.runtime import Runtime
from chatmem.server.ui.browse import Missing
from chatmem.server.ui.login import FormDep, Viewer, ViewerDep, runtime_of
from chatmem.server.ui.render import page, path
from chatmem.worker import Batch, BatchState

router = APIRouter(prefix="/ui", include_in_schema=False)

#: Batches listed at most per state.
SHOWN_BATCHES = 50
OUTCOMES = ("injected", "empty", "skipped", "degraded", "off")


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    share: float  # of the chart's largest bar, in [0, 1]
    text: str


@dataclass(frozen=True)
class Latency:
    count: int
    p50_ms: float | None
    p95_ms: float | None
    bars: list[Bar]


def sees_service(viewer: Viewer) -> bool:
    return viewer.is_admin or viewer.principal.key_id is None


def batches(runtime: Runtime, viewer: Viewer) -> dict[str, tuple[int, list[Batch]]]:
    """How many batches of each waiting state the viewer may see, and the oldest ones."""
    everyone = viewer.is_admin
    shown: dict[str, tuple[int, list[Batch]]] = {}
    for state in (BatchState.PENDING, BatchState.LEASED, BatchState.DEAD):
        found = runtime.outbox.batches(state, limit=10_000)
        mine = [b for b in found if everyone or b.key.tenant_id == viewer.tenant_id]
        shown[state.value] = (len(mine), mine[:SHOWN_BATCHES])
    return shown


def _samples(metric: MetricWrapperBase, suffix: str) -> Iterable[tuple[dict[str, str], float]]:
    for family in metric.collect():
        for sample in family.samples:
            if sample.name.endswith(suffix):
                yield sample.labels, sample.value


def outcome_bars(runtime: Runtime) -> tuple[list[Bar], float | None, float | None]:
    """Chat requests by what memory did, the hit rate (injected of those that searched or
    were skipped, i.e. memory on) and the degraded share."""
    counts = dict.fromkeys(OUTCOMES, 0.0)
    for labels, value in _samples(runtime.metrics.memory_requests, "_total"):
        counts[labels.get("outcome", "")] = value
    top = max(counts.values()) or 1.0
    bars = [Bar(k, v, v / top, f"{v:.0f}") for k, v in counts.items()]
    on = sum(v for k, v in counts.items() if k != "off")
    hit = counts["injected"] / on if on else None
    degraded = counts["degraded"] / on if on else None
    return bars, hit, degraded


def latency(runtime: Runtime) -> Latency:
    """The memory step's time per chat request: a histogram and its p50 and p95,
    interpolated within the buckets as Prometheus's ``histogram_quantile`` does."""
    cumulative = [
        (float(labels["le"]), value)
        for labels, value in _samples(runtime.metrics.memory_seconds, "_bucket")
    ]
    total = cumulative[-1][1] if cumulative else 0.0
    per_bucket, before = [], 0.0
    for bound, seen in cumulative:
        per_bucket.append((bound, seen - before))
        before = seen
    top = max((n for _, n in per_bucket), default=0.0) or 1.0
    bars = [Bar(_bound_text(bound), n, n / top, f"{n:.0f}") for bound, n in per_bucket]
    return Latency(int(total), _quantile(cumulative, 0.5), _quantile(cumulative, 0.95), bars)


def _bound_text(bound: float) -> str:
    return "> 10 s" if bound == float("inf") else f"≤ {bound * 1000:g} ms"


def _quantile(cumulative: list[tuple[float, float]], q: float) -> float | None:
    if not cumulative or cumulative[-1][1] == 0:
        return None
    rank = q * cumulative[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, seen in cumulative:
        if seen >= rank:
            if bound == float("inf"):
                return lower_bound * 1000
            inside = (rank - lower_count) / (seen - lower_count) if seen > lower_count else 0
            return (lower_bound + (bound - lower_bound) * inside) * 1000
        lower_bound, lower_count = bound, seen
    return None


def key_counts(runtime: Runtime, viewer: Viewer) -> dict[str, tuple[int, int]]:
    """Live and revoked keys by tenant (the viewer's tenant only, for a tenant key)."""
    tenant = None if viewer.is_admin else viewer.tenant_id
    counts: dict[str, tuple[int, int]] = {}
    for info in runtime.keys.keys(tenant):
        live, revoked = counts.get(info.tenant_id, (0, 0))
        counts[info.tenant_id] = (live, revoked + 1) if info.revoked else (live + 1, revoked)
    return dict(sorted(counts.items()))


def status(runtime: Runtime) -> dict[str, str]:
    """The store's, the embedder's and the service database's state, in words."""
    memory = runtime.long_term
    return {
        "memory store": repr(memory.store) if memory else f"off: {runtime.memory_error}",
        "embedder": (
            f"{memory.embedder.model} ({memory.embedder.dimension} dimensions)" if memory else "—"
        ),
        "service database": runtime.database_error or str(runtime.data_dir / "service.db"),
        "extraction worker": "running" if runtime.worker is not None else "off",
    }


@router.get("/ops", response_class=HTMLResponse)
def operations(request: Request, viewer: ViewerDep) -> HTMLResponse:
    runtime = runtime_of(request)
    service = sees_service(viewer)
    outcomes, hit_rate, degraded = outcome_bars(runtime) if service else ([], None, None)
    return page(
        request,
        "ops.html",
        viewer,
        batches=batches(runtime, viewer),
        service=service,
        keys=key_counts(runtime, viewer),
        health=status(runtime) if service else {},
        outcomes=outcomes,
        hit_rate=hit_rate,
        degraded=degraded,
        latency=latency(runtime) if service else None,
    )


@router.post("/ops/batches/{batch_id}/retry", response_class=HTMLResponse)
def retry(request: Request, viewer: ViewerDep, form: FormDep, batch_id: str) -> Response:
    """Queue a dead batch again (its attempts start over)."""
    runtime = runtime_of(request)
    batch = runtime.outbox.get(batch_id)
    if batch is None or not (viewer.is_admin or batch.key.tenant_id == viewer.tenant_id):
        raise Missing(f"batch {batch_id}")
    if batch.state is BatchState.DEAD:
        runtime.outbox.requeue(batch_id)
        if runtime.worker is not None:
            runtime.worker.notify()
    return RedirectResponse(path("ops", notice="retried"), status_code=303)


__all__ = ["latency", "outcome_bars", "router"]
