"""Session store latency: single-message appends and window reads, per backend.

Builds one 1,000-message session per backend with single-message appends (timing each),
then reads its last ``--window`` messages and the whole log. Redis is skipped when no server
answers at ``--redis``; its keys live under a random prefix, deleted afterwards.

    python benchmarks/sessions.py [--messages 1000] [--window 20] [--redis redis://…]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from chatmem.errors import StoreUnavailableError
from chatmem.messages import Message, SessionKey
from chatmem.sessions import InMemorySessionStore, SessionStore, SQLiteSessionStore


def _ms(samples_ns: list[int], quantile: float) -> float:
    ordered = sorted(samples_ns)
    return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] / 1e6


def _timed(action: Callable[[], object], repeat: int) -> list[int]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        action()
        samples.append(time.perf_counter_ns() - start)
    return samples


def measure(store: SessionStore, messages: int, window: int) -> list[float]:
    """append p50, append p95, window read p50, full read p50 (milliseconds)."""
    key = SessionKey("bench", "user", uuid.uuid4().hex)
    appends: list[int] = []
    for i in range(messages):
        role = "user" if i % 2 == 0 else "assistant"
        sent = Message.model_validate(
            {"role": role, "content": f"message {i} " * 8, "turn_id": i // 2}
        )
        start = time.perf_counter_ns()
        store.append(key, [sent])
        appends.append(time.perf_counter_ns() - start)
    windows = _timed(lambda: store.read(key, -window), 200)
    full = _timed(lambda: store.read(key), 20)
    return [
        _ms(appends, 0.5),
        _ms(appends, 0.95),
        statistics.median(windows) / 1e6,
        statistics.median(full) / 1e6,
    ]


@contextmanager
def _redis(url: str) -> Iterator[SessionStore | None]:
    try:
        from chatmem.sessions.redis import RedisSessionStore
    except ImportError:
        yield None
        return
    prefix = f"chatmem-bench-{uuid.uuid4().hex[:8]}"
    try:
        store = RedisSessionStore(url, prefix=prefix)
    except StoreUnavailableError:
        yield None
        return
    try:
        yield store
    finally:
        store.close()
        _drop_prefix(url, prefix)


def _drop_prefix(url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        for name in client.scan_iter(match=f"{prefix}:*"):
            client.delete(name)
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()

    rows: list[tuple[str, list[float] | None]] = []
    memory = InMemorySessionStore()
    rows.append(("memory", measure(memory, args.messages, args.window)))
    with tempfile.TemporaryDirectory() as directory:
        sqlite = SQLiteSessionStore(Path(directory) / "sessions.db")
        rows.append(("sqlite", measure(sqlite, args.messages, args.window)))
        sqlite.close()
    with _redis(args.redis) as redis_store:
        figures = measure(redis_store, args.messages, args.window) if redis_store else None
        rows.append(("redis", figures))

    header = (
        "backend",
        "append p50 ms",
        "append p95 ms",
        f"read last {args.window} p50 ms",
        f"read all {args.messages} p50 ms",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, figures in rows:
        cells = [f"{value:.3f}" for value in figures] if figures else ["unreachable"] * 4
        print("| " + " | ".join([name, *cells]) + " |")


if __name__ == "__main__":
    main()
