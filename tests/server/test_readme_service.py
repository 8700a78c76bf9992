"""The README's service examples, run as a newcomer runs them: against a real
``chatmem serve --scripted-upstream`` process, with the official OpenAI SDK (issue 17)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
DOCUMENTED = "http://127.0.0.1:8080"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATMEM")}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    server = subprocess.Popen(
        [sys.executable, "-m", "chatmem.cli", "serve", *args, "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        assert server.poll() is None, server.communicate()[0]
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return server, base
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the service did not start"
        time.sleep(0.2)


def _stop(server: subprocess.Popen[str]) -> str:
    server.terminate()
    output, _ = server.communicate(timeout=60)
    return output


@pytest.mark.slow
def test_the_readme_sdk_block_runs_as_copied_against_chatmem_serve(tmp_path: Path) -> None:
    blocks = re.findall(r"```py\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no py block"
    server, base = _serve(tmp_path, "--scripted-upstream")
    try:
        for block in blocks:
            assert DOCUMENTED in block, "the block names the documented address"
            source = block.replace(DOCUMENTED, base)  # the only change: a free port
            done = subprocess.run(
                [sys.executable, "-c", source], capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stderr[-3000:]
            assert done.stdout.strip(), "the block prints the model's answer"
    finally:
        log = _stop(server)
    assert "Traceback" not in log, log[-3000:]


def test_a_chat_without_an_upstream_says_how_to_configure_one_and_is_not_retried(
    tmp_path: Path,
) -> None:
    server, base = _serve(tmp_path)
    try:
        sent: list[httpx.Request] = []
        http = httpx.Client(event_hooks={"request": [sent.append]})
        client = openai.OpenAI(
            base_url=f"{base}/v1", api_key="anonymous", max_retries=2, http_client=http
        )
        try:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], user="alice"
            )
        except openai.APIStatusError as exc:
            assert exc.status_code == 503
            assert exc.response.headers["x-should-retry"] == "false"
            assert "--scripted-upstream" in exc.message and "--upstream" in exc.message
        else:
            raise AssertionError("a chat without an upstream was answered")
        assert len(sent) == 1  # not retried: a retry cannot mend a missing configuration
        http.close()
    finally:
        _stop(server)
