"""Prometheus metrics of one service, in a registry of its own (two apps in one process
never share counters): request latency by route, memory hits, skips and degradations,
the extraction queue's depth, and webhook deliveries."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.request_seconds = Histogram(
            "chatmem_request_seconds",
            "Request latency by route and status class.",
            ["route", "method", "status"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.memory_seconds = Histogram(
            "chatmem_memory_seconds",
            "Time memory added to a chat request (decide, search, inject).",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.memory_hits = Counter(
            "chatmem_memory_hits_total",
            "Memories injected into chat requests.",
            registry=self.registry,
        )
        self.memory_requests = Counter(
            "chatmem_memory_requests_total",
            "Chat requests by what memory did: injected, empty, skipped, degraded, off.",
            ["outcome"],
            registry=self.registry,
        )
        self.memory_light = Counter(
            "chatmem_memory_light_total",
            "Searches run while others waited for a search thread: light (no late rerank,"
            " one embedding of the query).",
            registry=self.registry,
        )
        self.memory_skips = Counter(
            "chatmem_memory_skips_total",
            "Searches skipped by the decision, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.webhooks = Counter(
            "chatmem_webhook_deliveries_total",
            "Webhook deliveries by outcome: delivered, retried, failed.",
            ["outcome"],
            registry=self.registry,
        )
        self.queue_depth: Callable[[], int] = lambda: 0
        depth = Gauge(
            "chatmem_extraction_queue_depth",
            "Extraction batches waiting or running.",
            registry=self.registry,
        )
        depth.set_function(lambda: float(self.queue_depth()))

    def render(self) -> bytes:
        return generate_latest(self.registry)


__all__ = ["CONTENT_TYPE", "Metrics"]
