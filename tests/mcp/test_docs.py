"""docs/integrations/mcp.md: its stdio example runs as written, its desktop config is valid
JSON that starts ``chatmem mcp``, and ``import chatmem`` leaves ``mcp`` unimported."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "mcp.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_chatmem_mcp_is_a_command() -> None:
    from chatmem.cli import app

    group = typer.main.get_command(app)
    assert "mcp" in getattr(group, "commands", {})


@pytest.mark.slow
def test_the_stdio_example_runs(tmp_path: Path) -> None:
    example = _blocks("python")[0]  # run as written: it starts `chatmem mcp`
    (tmp_path / "example.py").write_text(example, encoding="utf-8")
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    ran = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert re.match(r"^\d\.\d\d User is allergic to peanuts - .*cosine", lines[0]), lines
    assert lines[1:] == ["User's relevant context:", lines[2]]
    assert lines[2].endswith("] User is allergic to peanuts")
    assert (tmp_path / "mcp-demo.db").exists()


def test_the_desktop_config_starts_chatmem_mcp() -> None:
    config = json.loads(_blocks("json")[0])
    assert config == {
        "mcpServers": {"chatmem": {"command": "chatmem", "args": ["mcp", "--user", "me"]}}
    }


def test_import_chatmem_does_not_import_mcp() -> None:
    code = "import sys, chatmem, chatmem.mcp, chatmem.mcp.cli; print('mcp' in sys.modules)"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert ran.stdout.strip() == "False", ran.stderr
