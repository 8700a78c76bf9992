"""The examples in docs/ are what the service really answers (issue 17)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fastapi.testclient import TestClient

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_documented_400_is_the_real_answer(service: TestClient) -> None:
    text = (DOCS / "service.md").read_text()
    documented = json.loads(re.findall(r"```json\n(\{\"error\".*?)\n```", text, flags=re.S)[0])
    answer = service.post(
        "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "bogus", "content": "hi"}]},
    )
    assert answer.status_code == 400
    assert answer.json() == documented


def test_the_documented_session_listing_has_the_real_shape(service: TestClient) -> None:
    """The example of docs/service.md's "Times on the wire": the same fields, and the same
    time format (the times themselves differ)."""
    text = (DOCS / "service.md").read_text()
    documented = json.loads(re.findall(r"```json\n(\{\"sessions\".*?)\n```", text, flags=re.S)[0])
    said = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    service.post("/v1/sessions/trip/messages", json={"user_id": "alice", "messages": said})
    answer = service.get("/v1/sessions", params={"user_id": "alice"}).json()
    [real], [example] = answer["sessions"], documented["sessions"]
    shape = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z$")
    assert shape.match(example["updated_at"]) and shape.match(real["updated_at"])
    assert {**real, "updated_at": example["updated_at"]} == example


def _blocks(language: str) -> list[str]:
    text = (DOCS / "service.md").read_text()
    return re.findall(rf"```{language}\n(.*?)\n```", text, flags=re.S)


def test_every_documented_config_loads(tmp_path: Path) -> None:
    """Each YAML block of docs/service.md is a config `chatmem serve --config` accepts."""
    from chatmem.server.config import load_config

    blocks = _blocks("yaml")
    assert len(blocks) >= 2
    for number, block in enumerate(blocks):
        path = tmp_path / f"example-{number}.yaml"
        path.write_text(block, encoding="utf-8")
        load_config(path, environ={})  # raises ConfigError naming the field when wrong


def test_the_documented_job_answer_has_the_real_shape(service: TestClient) -> None:
    from tests.server.conftest import ADMIN_KEY

    [documented] = [json.loads(block) for block in _blocks("json") if block.startswith('{"job"')]
    answer = service.post(
        "/v1/admin/maintenance/decay", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert answer.status_code == 200, answer.text
    real = answer.json()
    assert set(real) == set(documented)
    assert set(real["counts"]) == set(documented["counts"])
