"""docs/integrations/client.md runs as written against a served app, and prints what its
comments say it prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chatmem import LocalEmbedder
from tests.client.conftest import serving

PAGE = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "client.md"
DOCUMENTED_URL = "http://127.0.0.1:8080"


def test_the_client_page_runs_as_written(
    tmp_path: Path,
    embedder: LocalEmbedder,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = PAGE.read_text()
    [command] = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    admin_key = re.findall(r"CHATMEM__AUTH__ADMIN_KEY=(\S+)", command)[0]
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 2 and all(DOCUMENTED_URL in block for block in blocks)
    monkeypatch.chdir(tmp_path)  # the example writes its export beside it

    with serving(tmp_path / "service", embedder, auth={"admin_key": admin_key}) as service:
        for block in blocks:
            code = block.replace(DOCUMENTED_URL, service.url)
            exec(compile(code, str(PAGE), "exec"), {"__name__": "client_docs"})

    printed = capsys.readouterr().out.splitlines()
    promised = re.findall(r"^[ \t]*print\(.*\)[ \t]+# (.+)$", blocks[0], flags=re.M)
    assert len(promised) == 7
    remaining = iter(printed)
    for line in promised:  # in order, each among what was printed
        assert any(line.strip() == out.strip() for out in remaining), (line, printed)
    assert "forgotten" in printed and "Ben prefers tea over coffee." in printed
    assert re.match(r"0\.\d\d I live in Lisbon", printed[0]), printed
