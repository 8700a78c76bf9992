"""Closing a SQLite file while other threads are inside it (issue 20).

Closing a connection another thread is using is a use-after-free in SQLite's C binding: the
process dies with a segfault. The race runs in a child process, so a crash shows as a
failed test with the child's stack (faulthandler), not as a dead test run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chatmem.errors import StoreError
from chatmem.stores.gate import ClosingLock, Gate

_RACE = textwrap.dedent(
    """
    import faulthandler, sys, threading
    faulthandler.enable()
    from chatmem.errors import StoreError
    from chatmem.messages import Message, SessionKey
    from chatmem.sessions.sqlite import SQLiteSessionStore

    path, rounds = sys.argv[1], int(sys.argv[2])
    unexpected = []
    for round_ in range(rounds):
        store = SQLiteSessionStore(f"{path}/s{round_}.db")
        key = SessionKey("t", "u", "s")
        store.append(key, [Message(role="user", content="x" * 200, turn_id=1)] * 50)
        running = threading.Semaphore(0)

        def reader() -> None:
            try:
                store.read(key, -1)
                running.release()
                while True:
                    store.read(key, -1)
                    store.length(key)
                    store.state(key)
            except StoreError:
                return  # the store closed under us: the typed error, as promised
            except BaseException as exc:  # boundary: anything else fails the test, below
                unexpected.append(repr(exc))

        threads = [threading.Thread(target=reader) for _ in range(4)]
        for thread in threads:
            thread.start()
        for _ in threads:
            running.acquire(timeout=10)  # every reader is inside its loop
        store.close()
        for thread in threads:
            thread.join(10)
    print("unexpected:", len(unexpected), unexpected[:3])
    sys.exit(1 if unexpected else 0)
    """
)


def test_closing_a_sqlite_file_under_its_readers_never_crashes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _RACE, str(tmp_path), "150"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert "Fatal Python error" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def test_a_gate_waits_for_the_calls_inside_before_it_closes() -> None:
    import threading

    gate = Gate("test resource")
    inside = threading.Event()
    leave = threading.Event()
    order: list[str] = []

    def call() -> None:
        with gate.passage():
            inside.set()
            leave.wait(5)
            order.append("call ended")

    worker = threading.Thread(target=call)
    worker.start()
    inside.wait(5)
    closer = threading.Thread(target=lambda: (gate.close(5), order.append("closed")))
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # still waiting for the call inside
    with pytest.raises(StoreError), gate.passage():  # but no new call gets in
        pass
    leave.set()
    worker.join(5)
    closer.join(5)
    assert order == ["call ended", "closed"]


def test_a_gate_gives_up_on_a_call_that_never_ends_and_says_so() -> None:
    gate = Gate("stuck resource")
    entered = gate.passage()
    entered.__enter__()
    try:
        import threading

        result: list[bool] = []
        closer = threading.Thread(target=lambda: result.append(gate.close(0.1)))
        closer.start()
        closer.join(5)
        assert result == [False]  # the owner must then leave its connections open
    finally:
        entered.__exit__(None, None, None)


def test_a_closing_lock_refuses_entry_once_closed() -> None:
    lock = ClosingLock("in-memory thing")
    with lock:
        pass
    lock.close()
    with pytest.raises(StoreError, match="in-memory thing is closed"), lock:
        pass
