"""The crash test of ``benchmarks/crash.py`` (issue 11), short: ``chatmem serve`` killed
with SIGKILL three times under chat and REST load, and nothing acknowledged lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks.crash import CrashConfig, run_crash


@pytest.mark.slow
def test_kill_9_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    config = CrashConfig(kills=3, seed=11, min_gap_s=0.5, max_gap_s=2.0, drain_wait_s=60)
    results = run_crash(config, tmp_path / "data")

    assert results["kills"] == 3
    assert results["acknowledged_writes"] > 0 and results["answered_turns"] > 0, results
    assert results["lost_writes"] == 0, results["lost_write_ids"]
    assert results["changed_writes"] == 0, results["changed_write_ids"]
    assert results["turns_missing_from_session"] == 0, results
    assert results["messages_missing_from_extraction"] == 0, results
    drain = results["drain_s_after_last_restart"]
    assert drain is not None and drain <= 30, results
    assert results["graceful_stop_exit_code"] == 0, results["server_log"]
    assert results["server_log"]["fatal_errors"] == 0, results["server_log"]
    assert results["passed"]
