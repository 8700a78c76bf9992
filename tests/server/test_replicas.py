"""Several ``chatmem serve`` replicas, one deployment (issue 15.2): three processes with
their own data dirs on loopback, one PostgreSQL (memories and service state) and one Redis
(sessions). Whatever replica a request lands on, it sees the same keys, response chains,
sessions and extraction queue; replicas killed with SIGKILL lose nothing acknowledged.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from chatmem.testing import ScriptedOpenAIServer

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

ADMIN_KEY = "cm-admin-replicas-test"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
REDIS_URL = os.environ.get("CHATMEM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
#: A dead replica's extraction lease runs out within the worker's lease (RetryPolicy.lease_s).
LEASE_S = 30


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Replica:
    """One ``chatmem serve`` process; ``start`` (again) on the same port and data dir."""

    name: str
    data_dir: Path
    env: dict[str, str]
    port: int = field(default_factory=_free_port)
    process: subprocess.Popen[str] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Replica:
        log = open(self.data_dir / f"{self.name}.log", "a")  # noqa: SIM115 - the process keeps it
        self.process = subprocess.Popen(
            [sys.executable, "-m", "chatmem.cli", "serve", "--port", str(self.port),
             "--scripted-upstream"],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        log.close()
        return self

    def wait_up(self) -> None:
        deadline = time.monotonic() + 180
        while True:
            assert self.process is not None and self.process.poll() is None, self.log()
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"{self.name} did not start:\n{self.log()}"
            time.sleep(0.2)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        path = self.data_dir / f"{self.name}.log"
        return path.read_text()[-4000:] if path.exists() else ""


@dataclass
class Deployment:
    postgres_uri: str
    schema: str
    replicas: dict[str, Replica]
    sessions_uri: str

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.postgres_uri, autocommit=True) as conn:
            return list(conn.execute(query.format(s=f"{self.schema}_service"), params))


@contextmanager
def _deploy(
    tmp_path: Path, postgres_uri: str, schema: str, extra: dict[str, dict[str, str]]
) -> Iterator[Deployment]:
    """Replicas named by ``extra`` (each with its own environment additions) sharing one
    PostgreSQL and one Redis; stopped, and their state dropped, afterwards."""
    from tests.pg_server import drop_schema
    from tests.sessions.helpers import drop_redis_prefix, require_redis

    require_redis()
    prefix = f"chatmem-replicas-{uuid.uuid4().hex[:8]}"
    separator = "&" if "?" in postgres_uri else "?"
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("CHATMEM")}
    base_env.update(
        CHATMEM__MEMORY__STORE=f"{postgres_uri}{separator}prefix={schema}",
        CHATMEM__MEMORY__SESSIONS__STORE=f"{REDIS_URL}?prefix={prefix}",
        CHATMEM__MEMORY__EXTRACTION_BATCH_SIZE="2",
        CHATMEM__MEMORY__SEARCH_BUDGET_MS="5000",
        CHATMEM__AUTH__ADMIN_KEY=ADMIN_KEY,
        PYTHONFAULTHANDLER="1",
    )
    replicas = {}
    for name, env in extra.items():
        directory = tmp_path / name
        directory.mkdir()
        replica_env = {**base_env, **env, "XDG_DATA_HOME": str(directory / "xdg")}
        replicas[name] = Replica(name, directory, replica_env).start()
    try:
        for replica in replicas.values():
            replica.wait_up()
        yield Deployment(postgres_uri, schema, replicas, f"{REDIS_URL}?prefix={prefix}")
    finally:
        for replica in replicas.values():
            replica.stop()
        drop_redis_prefix(prefix)
        drop_schema(postgres_uri, f"{schema}_service")


@pytest.fixture
def deployment(tmp_path: Path, postgres_uri: str, pg_schema: str) -> Iterator[Deployment]:
    """Three replicas (a, b, c); a's extraction model never answers in time, and c runs no
    extraction worker (``auto_store`` off), so a batch a dies holding goes to b."""
    with ScriptedOpenAIServer(responder=_slow_extraction, record=False) as slow:
        extra = {
            "a": {"CHATMEM__MEMORY__EXTERNAL_MODELS": (
                f'[{{model_role: memory_extraction, endpoint: "{slow.base_url}", model: slow,'
                " timeout_s: 600, retries: 0}]")},
            "b": {},
            "c": {"CHATMEM__MEMORY__AUTO_STORE": "false"},
        }  # fmt: skip
        _RELEASE.clear()
        try:
            with _deploy(tmp_path, postgres_uri, pg_schema, extra) as deployed:
                try:
                    yield deployed
                finally:
                    _RELEASE.set()  # before the stop: a's model calls end, and a stops at once
        finally:
            _RELEASE.set()


#: Set when the deployment goes, to let the slow model's pending answers end.
_RELEASE = threading.Event()


def _slow_extraction(body: dict[str, Any]) -> str:
    _RELEASE.wait(600)
    return "[]"


def _chat(base: str, user: str, session: str, text: str, headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": text}],
        "memory_context": {"user_id": user, "session_id": session},
    }
    return httpx.post(f"{base}/v1/chat/completions", json=body, headers=headers, timeout=60)


def _wait(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def test_replicas_share_keys_chains_the_queue_and_forgetting(deployment: Deployment) -> None:
    a, b, c = (deployment.replicas[n] for n in "abc")
    # A key created through a works on b.
    made = httpx.post(f"{a.base}/v1/admin/keys", json={"tenant_id": "acme"}, headers=ADMIN)
    key = {"Authorization": f"Bearer {made.json()['key']}"}
    assert httpx.get(f"{b.base}/v1/memory", params={"user_id": "x"}, headers=key).status_code == 200
    assert httpx.get(f"{b.base}/v1/memory", params={"user_id": "x"},
                     headers={"Authorization": "Bearer cm-unknown"}).status_code == 401  # fmt: skip
    # A Responses chain begun on a continues on b, and on c, for its own user only.
    zoe = {"model": "m", "memory_context": {"user_id": "zoe"}}
    first = httpx.post(f"{a.base}/v1/responses", headers=key, timeout=60,
                       json={**zoe, "input": "Hello there."}).json()  # fmt: skip
    again = {**zoe, "input": "Again.", "previous_response_id": first["id"]}
    second = httpx.post(f"{b.base}/v1/responses", headers=key, timeout=60, json=again)
    assert second.status_code == 200, second.text
    stranger = httpx.post(f"{c.base}/v1/responses", headers=key, timeout=60, json={
        "model": "m", "input": "Mine?", "previous_response_id": second.json()["id"],
        "memory_context": {"user_id": "mallory"}})  # fmt: skip
    assert stranger.status_code == 404
    # A chat on a: a's worker claims the batch and hangs on its model; a is killed.
    for text in ("My locker code is 4417.", "I live in Porto and I love surfing."):
        assert _chat(a.base, "anna", "s1", text, key).status_code == 200
    leased = "SELECT batch_id, lease FROM {s}.extraction_batches WHERE state = 'leased'"
    _wait("a to claim the batch", lambda: bool(deployment.sql(leased)), 60)
    [(batch_id, lease)] = deployment.sql(leased)
    a.kill()
    # b's worker takes it up when a's lease runs out, and c recalls what b extracted.
    done = "SELECT state, attempts FROM {s}.extraction_batches WHERE batch_id = %s"
    _wait("b to extract the batch", lambda: deployment.sql(done, batch_id)[0][0] == "done",
          LEASE_S + 60)  # fmt: skip
    assert deployment.sql(done, batch_id) == [("done", 2)]
    found = httpx.post(f"{c.base}/v1/memory/search", headers=key, timeout=60,
                       json={"query": "What is the locker code?", "user_id": "anna"})  # fmt: skip
    assert found.status_code == 200, found.text
    assert "4417" in found.text
    # Forgetting anna on b leaves nothing of hers on any replica.
    forgotten = httpx.delete(f"{b.base}/v1/memory", params={"user_id": "anna"}, headers=key)
    assert forgotten.status_code == 200 and forgotten.json()["deleted"] >= 1
    a.start().wait_up()
    for replica in (a, b, c):
        listed = httpx.get(f"{replica.base}/v1/memory", params={"user_id": "anna"}, headers=key)
        assert listed.json()["memories"] == [], replica.name
        sessions = httpx.get(f"{replica.base}/v1/sessions", params={"user_id": "anna"},
                             headers=key)  # fmt: skip
        assert sessions.json()["sessions"] == [], replica.name
    queued = "SELECT COUNT(*) FROM {s}.extraction_batches WHERE user_id = %s"
    assert deployment.sql(queued, "anna") == [(0,)]
    assert lease  # a's lease named its host and process


# -- load while replicas are killed and restarted -------------------------------------------


@dataclass
class Acked:
    """What the replicas acknowledged: memory ids by text, and chat turns by session."""

    memories: dict[str, list[str]] = field(default_factory=dict)
    turns: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    refused: int = 0
    #: Answers whose turn a replica did not store (``X-Chatmem-Turn`` other than
    #: ``stored``): not acknowledged writes, counted to show that none happened quietly.
    unstored: Counter[str] = field(default_factory=Counter)
    #: What went wrong killing and restarting replicas (with the replica's log).
    chaos_errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _one_write(replica: Replica, number: int, acked: Acked) -> None:
    """A REST add or a chat turn through ``replica``; recorded only when acknowledged."""
    user = f"load{number % 4}"
    try:
        if number % 2:
            text = f"Load fact {number}: the code of crate {number} is {number * 7}."
            answer = httpx.post(f"{replica.base}/v1/memory", timeout=30,
                                json={"user_id": user, "content": text})  # fmt: skip
            if answer.status_code == 201:
                with acked.lock:
                    acked.memories[text] = [m["id"] for m in answer.json()["memories"]]
                return
        else:
            session = f"s{number % 3}"
            text = f"Load note {number}: my locker number is {1000 + number}."
            answer = _chat(replica.base, user, session, text)
            if answer.status_code == 200:
                turn = answer.headers.get("X-Chatmem-Turn", "absent")
                with acked.lock:
                    if turn == "stored":
                        acked.turns.setdefault((user, session), []).append(text)
                    else:
                        acked.unstored[f"{replica.name}: {turn}"] += 1
                return
    except httpx.HTTPError:
        pass  # the replica died under the request: nothing was promised
    with acked.lock:
        acked.refused += 1


def _load(deployment: Deployment, seconds: float, kills: int) -> Acked:
    """Writers spread over the live replicas while a chaos thread kills one replica with
    SIGKILL and restarts it, ``kills`` times."""
    acked = Acked()
    replicas = list(deployment.replicas.values())
    stop = threading.Event()
    counter = iter(range(1_000_000))
    counter_lock = threading.Lock()

    def writer(seed: int) -> None:
        chooser = random.Random(seed)
        while not stop.is_set():
            live = [r for r in replicas if r.process is not None and r.process.poll() is None]
            with counter_lock:
                number = next(counter)
            _one_write(chooser.choice(live), number, acked)

    def chaos() -> None:
        chooser = random.Random(15)
        for _ in range(kills):
            if stop.wait(seconds / (kills + 1)):
                return
            victim = chooser.choice(replicas)
            try:
                victim.kill()
                time.sleep(1)
                victim.start().wait_up()
            except (AssertionError, OSError, subprocess.SubprocessError) as exc:
                acked.chaos_errors.append(f"{victim.name}: {exc!r}\n{victim.log()}")
                return

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=chaos))
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(240)
    return acked


def test_no_acknowledged_write_is_lost_or_doubled_while_replicas_die(
    tmp_path: Path, postgres_uri: str, pg_schema: str
) -> None:
    extra: dict[str, dict[str, str]] = {"a": {}, "b": {}, "c": {}}
    with _deploy(tmp_path, postgres_uri, pg_schema, extra) as deployment:
        acked = _load(deployment, seconds=40, kills=3)
        assert len(acked.memories) > 20 and sum(map(len, acked.turns.values())) > 20
        # The queue drains (a dead replica's leases run out) and nothing dies.
        open_batches = (
            "SELECT COUNT(*) FROM {s}.extraction_batches WHERE state IN ('pending', 'leased')"
        )
        _wait("the queue to drain", lambda: deployment.sql(open_batches) == [(0,)], LEASE_S + 90)
        states = dict(
            deployment.sql("SELECT state, COUNT(*) FROM {s}.extraction_batches GROUP BY state")
        )
        assert set(states) <= {"done"}, states
        stored = Counter(
            text for (text,) in deployment.sql(
                f"SELECT body::jsonb -> 'content' ->> 'raw' FROM {pg_schema}.memories")
        )  # fmt: skip
        ids = {i for (i,) in deployment.sql(f"SELECT id FROM {pg_schema}.memories")}
        lost = [t for t, made in acked.memories.items() if not set(made) <= ids]
        doubled = [t for t, n in stored.items() if n > 1]
        turns_lost, turns_doubled = _session_check(deployment, acked)
    print(f"\nreplicas: {len(acked.memories)} adds and {sum(map(len, acked.turns.values()))}"
          f" turns acknowledged, {acked.refused} refused while a replica was down,"
          f" {sum(acked.unstored.values())} answered without storing their turn;"
          f" {len(ids)} memories, {states.get('done', 0)} batches done")  # fmt: skip
    assert acked.chaos_errors == []
    logs = "\n".join(_troubles(r) for r in deployment.replicas.values())
    assert lost == [] and turns_lost == [], f"unstored answers {dict(acked.unstored)}\n{logs}"
    assert turns_doubled == []
    # Each turn goes to one extraction batch, whichever replicas race to queue it (a batch
    # is named by the message it starts at), so no fact is extracted and stored twice.
    assert doubled == [], logs


def _troubles(replica: Replica) -> str:
    """The warnings and errors in a replica's log, for a failure's message."""
    path = replica.data_dir / f"{replica.name}.log"
    lines = path.read_text().splitlines() if path.exists() else []
    picked = [line for line in lines if " WARNING " in line or " ERROR " in line]
    return f"-- {replica.name}:\n" + "\n".join(picked[-40:])


def _session_check(deployment: Deployment, acked: Acked) -> tuple[list[str], list[str]]:
    """Acknowledged chat turns missing from their session log, and turns logged twice."""
    from chatmem.messages import Role, SessionKey
    from chatmem.sessions import open_session_store

    store = open_session_store(deployment.sessions_uri)
    lost: list[str] = []
    doubled: list[str] = []
    try:
        for (user, session), texts in acked.turns.items():
            said = Counter(
                m.content for m in store.read(SessionKey("default", user, session))
                if m.role is Role.USER
            )  # fmt: skip
            lost += [t for t in texts if said[t] == 0]
            doubled += [t for t, n in said.items() if n > 1]
    finally:
        store.close()
    return lost, doubled
