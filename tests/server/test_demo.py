"""``chatmem demo``'s loop, run in process: it waits for extraction as the admin, and the
queue drains (it once waited out its 30 s limit, when /readyz stopped telling anonymous
callers the queue's length)."""

from __future__ import annotations

from pathlib import Path

from chatmem.server.demo import run_demo


def test_the_demo_sees_its_queue_drain_and_recalls_across_sessions(tmp_path: Path) -> None:
    said: list[str] = []
    result = run_demo(said.append, data_dir=tmp_path / "demo")
    assert result["extraction_drained"] is True
    assert [outcome for _, _, outcome in result["recall"]] == ["injected", "injected"]
    assert "$10,000" not in result["bob"][0]
