"""Crash test (issue 11): ``kill -9`` of ``chatmem serve`` at random moments under chat and
REST load, then a check that nothing acknowledged was lost.

A real ``chatmem serve --scripted-upstream`` runs on a temporary data directory. Client
threads send chat completions (streamed and plain, several users and sessions, with
``memory_context``) and REST writes (``POST /v1/memory``), and record what the service
acknowledged: a write answered 2xx with its memory ids, a turn whose whole answer (or
``[DONE]``) arrived. At moments drawn from a seeded RNG the server is killed with SIGKILL
and started again on the same data, the load going on. At the last kill the load stops;
after that restart the script measures the time until every turn in every session is in
a DONE extraction batch (the queue empty), stops the server with SIGTERM and checks:

- every acknowledged REST write is in the store, by id, with its content;
- every answered turn is in its session's log;
- every user and assistant message of every session reached a DONE extraction batch.

Figures are printed and written as JSON; the exit status is 1 when a promise failed.

    python benchmarks/crash.py [--kills 10] [--seed 1] [--out /tmp/crash.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _served import (  # noqa: E402
    Served,
    conversation_ids,
    extracted_ids,
    outbox_counts,
    session_messages,
    stored_memories,
    unqueued_messages,
)
from chatmem.messages import Role  # noqa: E402
from chatmem.worker import BatchState  # noqa: E402

ADMIN_KEY = "crash-admin-key-0123456789"

_CHAT_TEMPLATES = (
    "Note {n}: my locker code is {code}.",
    "Remember that my parking spot for trip {n} is on level {small}.",
    "I walked {small} km this morning, day {n} of my plan.",
    "What should I cook tonight? Question {n}.",
    "My cousin number {n} lives in Porto and works as a baker.",
)


@dataclass(frozen=True)
class CrashConfig:
    """What the crash test does; the defaults are the documented run."""

    kills: int = 10
    seed: int = 1
    #: Seconds of load between a restart being ready and the next kill (uniform).
    min_gap_s: float = 1.0
    max_gap_s: float = 5.0
    chat_threads: int = 3
    rest_threads: int = 2
    users: tuple[str, ...] = ("ana", "ben", "cy", "dee")
    sessions_per_user: int = 2
    #: memory.extraction_batch_size: turns a session buffers before a batch is queued.
    batch_size: int = 5
    #: Pause of each client between requests.
    think_s: float = 0.02
    #: The promise: every turn extracted within this many seconds of the last restart.
    drain_limit_s: float = 30.0
    #: How long to keep waiting past the limit, to report the real figure.
    drain_wait_s: float = 120.0


@dataclass(frozen=True)
class Write:
    user: str
    memory_id: str
    content: str


@dataclass(frozen=True)
class Turn:
    user: str
    session: str
    text: str
    stream: bool


@dataclass
class Ledger:
    """What the service acknowledged, and what it refused or dropped, thread-safe."""

    writes: list[Write] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    attempts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, what: str) -> None:
        with self.lock:
            self.attempts[what] += 1

    def wrote(self, writes: list[Write]) -> None:
        with self.lock:
            self.writes.extend(writes)

    def answered(self, turn: Turn) -> None:
        with self.lock:
            self.turns.append(turn)


# -- the load ----------------------------------------------------------------------------


def _chat_once(http: httpx.Client, base: str, turn: Turn) -> bool:
    """Send one chat turn; True when the whole answer arrived."""
    body = {
        "model": "scripted",
        "messages": [{"role": "user", "content": turn.text}],
        "memory_context": {"user_id": turn.user, "session_id": turn.session},
        "stream": turn.stream,
    }
    url = f"{base}/v1/chat/completions"
    if not turn.stream:
        answer = http.post(url, json=body)
        return answer.status_code == 200 and bool(answer.json().get("choices"))
    with http.stream("POST", url, json=body) as answer:
        lines = [line for line in answer.iter_lines() if line]
        return answer.status_code == 200 and bool(lines) and lines[-1] == "data: [DONE]"


def _rest_once(http: httpx.Client, base: str, user: str, body: dict[str, Any]) -> list[Write]:
    """One ``POST /v1/memory``; the memories it acknowledged (none unless 2xx)."""
    answer = http.post(f"{base}/v1/memory", json={"user_id": user, **body})
    if not answer.is_success:
        return []
    return [Write(user, m["id"], m["content"]["raw"]) for m in answer.json()["memories"]]


def _rest_body(rng: random.Random, n: int, writer: int) -> dict[str, Any]:
    if rng.random() < 0.25:  # a chat: several memories in one atomic write
        return {
            "messages": [
                {"role": "user", "content": f"Imported line {n} of writer {writer}: ref X{n:06d}."},
                {"role": "assistant", "content": f"Filed entry {n} under ref X{n:06d}."},
            ]
        }
    return {"content": f"Ledger entry {n} from writer {writer}: reference code W{n:06d}."}


class Load:
    """Client threads sending chats and REST writes until :meth:`stop`, whatever the
    server's state: while it is down their requests fail and are not counted as answered."""

    def __init__(self, config: CrashConfig, base: str, ledger: Ledger) -> None:
        self.config, self.base, self.ledger = config, base, ledger
        self._stopping = threading.Event()
        self._numbers = iter(range(1, 10**9))
        self._numbers_lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._chat, args=(i,), name=f"chat-{i}", daemon=True)
            for i in range(config.chat_threads)
        ] + [
            threading.Thread(target=self._rest, args=(i,), name=f"rest-{i}", daemon=True)
            for i in range(config.rest_threads)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(60)

    def _next(self) -> int:
        with self._numbers_lock:
            return next(self._numbers)

    def _pause(self, failed: bool) -> None:
        self._stopping.wait(0.1 if failed else self.config.think_s)

    def _chat(self, index: int) -> None:
        config = self.config
        rng = random.Random(f"{config.seed}-chat-{index}")
        with httpx.Client(timeout=30) as http:
            while not self._stopping.is_set():
                n = self._next()
                template = rng.choice(_CHAT_TEMPLATES)
                turn = Turn(
                    user=rng.choice(config.users),
                    session=f"s{rng.randrange(config.sessions_per_user)}",
                    text=template.format(n=n, code=1000 + n % 9000, small=1 + n % 9),
                    stream=rng.random() < 0.5,
                )
                self.ledger.count("chat sent")
                try:
                    ok = _chat_once(http, self.base, turn)
                except (httpx.HTTPError, ValueError):
                    ok = False  # the server died first: nothing was promised
                if ok:
                    self.ledger.answered(turn)
                else:
                    self.ledger.count("chat not answered")
                self._pause(not ok)

    def _rest(self, index: int) -> None:
        config = self.config
        rng = random.Random(f"{config.seed}-rest-{index}")
        with httpx.Client(timeout=30) as http:
            while not self._stopping.is_set():
                n = self._next()
                user = rng.choice(config.users)
                self.ledger.count("rest sent")
                try:
                    writes = _rest_once(http, self.base, user, _rest_body(rng, n, index))
                except (httpx.HTTPError, ValueError, KeyError):
                    writes = []
                if writes:
                    self.ledger.wrote(writes)
                else:
                    self.ledger.count("rest not acknowledged")
                self._pause(not writes)


# -- the run -----------------------------------------------------------------------------


@dataclass
class Restart:
    """One kill and the restart after it."""

    killed_after_s: float  # seconds of load since the server was ready
    #: What the killed process left in the database: batches queued, batches leased (a
    #: worker was extracting them), and messages stored but not yet queued.
    pending_at_kill: int
    leased_at_kill: int
    unqueued_at_kill: int
    ready_s: float = 0.0  # start of the new process to /readyz 200


def _left_behind(served: Served, config: CrashConfig, gap: float) -> Restart:
    counts = outbox_counts(served.service_db)
    return Restart(
        killed_after_s=round(gap, 3),
        pending_at_kill=counts[BatchState.PENDING],
        leased_at_kill=counts[BatchState.LEASED],
        unqueued_at_kill=unqueued_messages(served.service_db, list(config.users)),
    )


def _restart(served: Served) -> float:
    started = time.monotonic()
    served.start()
    served.wait_ready()
    return time.monotonic() - started


def _unextracted(served: Served, config: CrashConfig) -> int:
    sessions = session_messages(served.service_db, list(config.users))
    done, _ = extracted_ids(served.service_db)
    return sum(len(conversation_ids(messages) - done) for messages in sessions.values())


def _drain(served: Served, config: CrashConfig, restarted_at: float) -> float | None:
    """Seconds from the last restart until the queue is empty and every session message is
    in a DONE batch; None if that did not happen within ``drain_wait_s``."""
    deadline = restarted_at + config.drain_wait_s
    while time.monotonic() < deadline:
        if served.queue_depth() == 0 and _unextracted(served, config) == 0:
            return time.monotonic() - restarted_at
        time.sleep(0.25)
    return None


def _log_counts(served: Served) -> dict[str, int]:
    text = served.log_path.read_text(errors="replace")
    return {
        "error_lines": sum(" ERROR " in line for line in text.splitlines()),
        "tracebacks": text.count("Traceback (most recent call last)"),
        "fatal_errors": text.count("Fatal Python error"),
        "failed_turn_stores": text.count("storing the turn failed"),
    }


def _check_writes(served: Served, writes: list[Write]) -> tuple[list[str], list[str]]:
    """(ids lost, ids whose content differs) among the acknowledged writes."""
    lost: list[str] = []
    changed: list[str] = []
    by_user: dict[str, list[Write]] = {}
    for write in writes:
        by_user.setdefault(write.user, []).append(write)
    for user, mine in by_user.items():
        found = stored_memories(served.memory_db, user, [w.memory_id for w in mine])
        for write in mine:
            record = found.get(write.memory_id)
            if record is None:
                lost.append(write.memory_id)
            elif record.content.raw != write.content:
                changed.append(write.memory_id)
    return lost, changed


def _check_turns(served: Served, config: CrashConfig, turns: list[Turn]) -> dict[str, Any]:
    sessions = session_messages(served.service_db, list(config.users))
    done, dead = extracted_ids(served.service_db)
    said: dict[tuple[str, str], Counter[str]] = {}
    for key, messages in sessions.items():
        said[(key.user_id, key.session_id)] = Counter(
            m.content for m in messages if m.role is Role.USER
        )
    missing = [t.text for t in turns if said.get((t.user, t.session), Counter())[t.text] == 0]
    unextracted = [
        message_id
        for messages in sessions.values()
        for message_id in sorted(conversation_ids(messages) - done)
    ]
    stored_user_turns = sum(sum(c.values()) for c in said.values())
    return {
        "sessions": len(sessions),
        "session_user_turns": stored_user_turns,
        "session_messages": sum(len(conversation_ids(m)) for m in sessions.values()),
        "turns_missing_from_session": len(missing),
        "turns_missing_from_session_examples": missing[:10],
        "duplicated_turns": sum(n - 1 for c in said.values() for n in c.values() if n > 1),
        "messages_missing_from_extraction": len(unextracted),
        "messages_missing_from_extraction_examples": unextracted[:10],
        "dead_batches": dead,
    }


def run_crash(config: CrashConfig, data_dir: Path) -> dict[str, Any]:
    """Run the crash test on ``data_dir`` (made if missing); returns the results."""
    rng = random.Random(config.seed)
    ledger = Ledger()
    restarts: list[Restart] = []
    began = time.monotonic()
    with Served(data_dir, ADMIN_KEY, batch_size=config.batch_size) as served:
        first_ready_s = _restart(served)
        load = Load(config, served.base, ledger)
        load.start()
        try:
            for kill in range(1, config.kills + 1):
                gap = rng.uniform(config.min_gap_s, config.max_gap_s)
                time.sleep(gap)
                served.kill()
                if kill == config.kills:
                    load.stop()  # what remains is the recovery of the last crash
                restart = _left_behind(served, config, gap)
                restarted_at = time.monotonic()
                restart.ready_s = round(_restart(served), 3)
                restarts.append(restart)
        finally:
            load.stop()
        drain_s = _drain(served, config, restarted_at)
        depth_at_stop = served.queue_depth()
        exit_code = served.stop()
        logs = _log_counts(served)
    lost, changed = _check_writes(served, ledger.writes)
    turns = _check_turns(served, config, ledger.turns)
    ready = [r.ready_s for r in restarts]
    results: dict[str, Any] = {
        "config": asdict(config),
        "data_dir": str(data_dir),
        "seconds": round(time.monotonic() - began, 1),
        "kills": len(restarts),
        "first_start_ready_s": round(first_ready_s, 3),
        "restarts": [asdict(r) for r in restarts],
        "restart_ready_s_median": round(statistics.median(ready), 3) if ready else None,
        "restart_ready_s_max": round(max(ready), 3) if ready else None,
        "kills_leaving_a_leased_batch": sum(r.leased_at_kill > 0 for r in restarts),
        "kills_leaving_unqueued_turns": sum(r.unqueued_at_kill > 0 for r in restarts),
        "requests": dict(ledger.attempts),
        "acknowledged_writes": len(ledger.writes),
        "lost_writes": len(lost),
        "lost_write_ids": lost[:20],
        "changed_writes": len(changed),
        "changed_write_ids": changed[:20],
        "answered_turns": len(ledger.turns),
        "answered_streamed": sum(t.stream for t in ledger.turns),
        **turns,
        "drain_s_after_last_restart": round(drain_s, 2) if drain_s is not None else None,
        "queue_depth_at_stop": depth_at_stop,
        "outbox_at_end": {s.value: n for s, n in outbox_counts(served.service_db).items()},
        "graceful_stop_exit_code": exit_code,
        "server_log": logs,
    }
    results["passed"] = passed(results, config)
    return results


def passed(results: dict[str, Any], config: CrashConfig) -> bool:
    """The promises of issue 11: nothing acknowledged lost, every turn extracted, the
    queue drained in time, and a clean stop."""
    drain = results["drain_s_after_last_restart"]
    return bool(
        results["kills"] >= config.kills
        and results["lost_writes"] == 0
        and results["changed_writes"] == 0
        and results["turns_missing_from_session"] == 0
        and results["messages_missing_from_extraction"] == 0
        and drain is not None
        and drain <= config.drain_limit_s
        and results["graceful_stop_exit_code"] == 0
        and results["server_log"]["fatal_errors"] == 0
    )


def summary(results: dict[str, Any]) -> str:
    drain = results["drain_s_after_last_restart"]
    rows = [
        ("kills (kill -9, then restart)", results["kills"]),
        ("acknowledged REST writes", results["acknowledged_writes"]),
        ("  lost", results["lost_writes"]),
        ("  content changed", results["changed_writes"]),
        ("answered chat turns (streamed)",
         f"{results['answered_turns']} ({results['answered_streamed']})"),
        ("  missing from session log", results["turns_missing_from_session"]),
        ("session messages (user + assistant)", results["session_messages"]),
        ("  missing from extraction (DONE)", results["messages_missing_from_extraction"]),
        ("dead extraction batches", results["dead_batches"]),
        ("kills leaving a leased batch / unqueued turns",
         f"{results['kills_leaving_a_leased_batch']} / {results['kills_leaving_unqueued_turns']}"),
        ("drain after last restart (s)", "never" if drain is None else drain),
        ("restart to ready (s), median / max",
         f"{results['restart_ready_s_median']} / {results['restart_ready_s_max']}"),
        ("graceful stop exit code", results["graceful_stop_exit_code"]),
        ("server log: ERROR lines / tracebacks",
         f"{results['server_log']['error_lines']} / {results['server_log']['tracebacks']}"),
        ("wall time (s)", results["seconds"]),
        ("PASSED", results["passed"]),
    ]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=CrashConfig.kills)
    parser.add_argument("--seed", type=int, default=CrashConfig.seed)
    parser.add_argument("--min-gap", type=float, default=CrashConfig.min_gap_s)
    parser.add_argument("--max-gap", type=float, default=CrashConfig.max_gap_s)
    parser.add_argument("--chat-threads", type=int, default=CrashConfig.chat_threads)
    parser.add_argument("--rest-threads", type=int, default=CrashConfig.rest_threads)
    parser.add_argument("--data-dir", type=Path, help="default: a new temporary directory")
    parser.add_argument("--out", type=Path, help="default: <tmp>/chatmem-crash-<seed>.json")
    args = parser.parse_args(argv)
    config = CrashConfig(
        kills=args.kills,
        seed=args.seed,
        min_gap_s=args.min_gap,
        max_gap_s=args.max_gap,
        chat_threads=args.chat_threads,
        rest_threads=args.rest_threads,
    )
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="chatmem-crash-"))
    results = run_crash(config, data_dir)
    out = args.out or Path(tempfile.gettempdir()) / f"chatmem-crash-{config.seed}.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(summary(results))
    print(f"results: {out}  server log: {data_dir / 'serve.log'}")
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
