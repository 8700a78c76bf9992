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
