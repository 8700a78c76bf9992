"""``chatmem add --expires`` and ``chatmem maintain``, run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from chatmem.cli.options import expiry
from chatmem.errors import ValidationError
from chatmem.records import utcnow


def _cli(tmp_path: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHATMEM_STORE": f"sqlite:///{tmp_path}/cli.db", "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "chatmem.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if ok:
        assert done.returncode == 0, done.stderr
    return done


@pytest.mark.slow
def test_add_with_an_expiry_then_maintain_decay_removes_it(tmp_path: Path) -> None:
    past = (utcnow() - timedelta(seconds=1)).isoformat()
    gone = _cli(tmp_path, "add", "--user", "alice", "--expires", past, "old voucher").stdout
    _cli(tmp_path, "add", "--user", "alice", "--expires", "7d", "new voucher")
    assert "not found" in _cli(tmp_path, "get", gone.strip(), ok=False).stderr
    report = json.loads(_cli(tmp_path, "maintain", "decay", "--user", "alice", "--json").stdout)
    assert report["counts"]["expired"] == 1
    history = _cli(tmp_path, "history", gone.strip()).stdout
    assert "expired" in history
    line = _cli(tmp_path, "maintain", "decay").stdout
    assert line.startswith("decay (tenant default): 0 expired")


@pytest.mark.slow
def test_maintain_quota_consolidate_and_reflect(tmp_path: Path) -> None:
    for text in ("I like green tea", "I like black tea", "I like oolong tea"):
        _cli(tmp_path, "add", "--user", "bob", text)
    done = _cli(tmp_path, "maintain", "quota", "--limit", "2", "--tenant", "default")
    assert "1 deleted" in done.stdout and "1 user(s)" in done.stdout
    assert _cli(tmp_path, "maintain", "consolidate", "--user", "bob").stdout.startswith(
        "consolidate"
    )
    assert _cli(tmp_path, "maintain", "reflect").stdout.startswith("reflect")
    refused = _cli(tmp_path, "maintain", "quota", ok=False)
    assert refused.returncode != 0 and "--limit" in refused.stderr


def test_expires_takes_a_time_or_a_duration() -> None:
    assert expiry("2030-01-02T03:04:05+02:00").isoformat() == "2030-01-02T01:04:05+00:00"
    assert expiry("2030-01-02T03:04:05").tzinfo is not None
    ahead = expiry("12h") - utcnow()
    assert timedelta(hours=11, minutes=59) < ahead <= timedelta(hours=12)
    with pytest.raises(ValidationError):
        expiry("tomorrow")


@pytest.mark.parametrize("when", ["999999999999d", "9000000d", "9999-12-31T23:59:59-14:00"])
def test_an_expiry_past_what_a_time_holds_is_one_line_naming_expires(
    tmp_path: Path, when: str
) -> None:
    """They were tracebacks (OverflowError from the date arithmetic)."""
    refused = _cli(tmp_path, "add", "--user", "ana", "--expires", when, "a voucher", ok=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert refused.stderr.count("\n") == 1 and "--expires" in refused.stderr
