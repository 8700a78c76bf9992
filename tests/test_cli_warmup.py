"""``chatmem warmup`` (issue 17.8): the first search's preparation, done at install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _warmup(cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHATMEM_CACHE_DIR": str(cache), "COLUMNS": "300"}
    return subprocess.run(
        [sys.executable, "-m", "chatmem.cli", "warmup"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_warmup_caches_the_fast_query_model(tmp_path: Path) -> None:
    done = _warmup(tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    [cached] = (tmp_path / "cache").glob("minilm-*.onnx")
    assert str(cached) in done.stdout and "MiB" in done.stdout


@pytest.mark.slow
def test_warmup_where_the_cache_cannot_be_written_says_so_and_succeeds(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    done = _warmup(blocked / "cache")
    assert done.returncode == 0, done.stderr
    assert "could not be cached" in done.stdout and "Traceback" not in done.stderr
