"""The service's YAML config: the design's shape, env overrides, errors that name the key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatmem.errors import ConfigError
from chatmem.llm.base import ModelRole
from chatmem.server.config import ServiceConfig, load_config
from chatmem.server.serving import tune_interpreter

DESIGN = """
memory:
  enabled: true
  auto_store: true
  milvus:
    address: "milvus:19530"
    collection: "agentic_memory"
    dimension: 384
  embedding:
    model: "all-MiniLM-L6-v2"
    dimension: 384
  default_retrieval_limit: 5
  default_similarity_threshold: 0.6
  extraction_batch_size: 10
external_models:
  - llm_provider: "vllm"
    model_role: "memory_rewrite"
    llm_endpoint: {address: "qwen", port: 8000}
    llm_model_name: "qwen3"
    llm_timeout_seconds: 30
    max_tokens: 100
    temperature: 0.1
  - llm_provider: "vllm"
    model_role: "memory_extraction"
    llm_endpoint: {address: "qwen", port: 8000}
    llm_model_name: "qwen3"
    llm_timeout_seconds: 30
    max_tokens: 500
    temperature: 0.1
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "chatmem.yaml"
    path.write_text(text)
    return path


def test_the_designs_config_section_is_read_as_written(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, DESIGN), environ={})
    assert config.memory.store_uri() == "milvus://milvus:19530?prefix=agentic_memory"
    assert config.memory.default_similarity_threshold == 0.6
    assert config.memory.extraction_batch_size == 10
    models = config.models()
    assert set(models.roles()) == {ModelRole.MEMORY_REWRITE, ModelRole.MEMORY_EXTRACTION}


def test_no_file_means_the_embedded_defaults() -> None:
    config = load_config(None, environ={})
    assert config == ServiceConfig()
    assert config.memory.store_uri() is None
    assert (config.server.host, config.server.port) == ("127.0.0.1", 8080)


def test_environment_overrides_win_and_are_typed(tmp_path: Path) -> None:
    environ = {
        "CHATMEM__MEMORY__DEFAULT_RETRIEVAL_LIMIT": "8",
        "CHATMEM__MEMORY__SESSIONS__STORE": "redis://127.0.0.1:6379/0",
        "CHATMEM__UPSTREAM__BASE_URL": "http://127.0.0.1:11434/v1",
        "UNRELATED": "x",
    }
    config = load_config(write(tmp_path, DESIGN), environ=environ)
    assert config.memory.default_retrieval_limit == 8
    assert config.memory.sessions.store == "redis://127.0.0.1:6379/0"
    assert config.upstream.base_url == "http://127.0.0.1:11434/v1"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("memory:\n  default_similarity_threshold: 1.5\n", "memory.default_similarity_threshold"),
        ("memory:\n  retrieval_limit: 5\n", "memory.retrieval_limit: unknown key"),
        ("memory:\n  milvus: {address: m:19530, dimension: 768}\n", "must match"),
        ("memory:\n  embedding: {model: bge-large, dimension: 1024}\n", "set base_url"),
        ("memory:\n  embedding: {query_model: turbo}\n", "memory.embedding.query_model"),
        ("memory:\n  embedding: {document_model: turbo}\n", "memory.embedding.document_model"),
        ("upstream:\n  base_url: localhost:8000\n", "upstream.base_url"),
        ("server:\n  switch_interval_ms: -1\n", "server.switch_interval_ms"),
        ("auth:\n  keys: [{tenant: acme}]\n", "auth.keys.0"),
        ("external_models:\n  - {model_role: memory_rewrite}\n", "external_models[0]: endpoint"),
        ("- just\n- a list\n", "top level must be a mapping"),
        ("memory: [unclosed\n", "not YAML"),
    ],
)
def test_a_bad_value_is_refused_with_the_key_named(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace("[", r"\[").replace(".", r"\.")):
        load_config(write(tmp_path, text), environ={})


def test_a_bad_override_names_the_key_too(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"memory\.extraction_batch_size"):
        load_config(None, environ={"CHATMEM__MEMORY__EXTRACTION_BATCH_SIZE": "zero"})


def test_config_check_command(tmp_path: Path) -> None:
    good = write(tmp_path, DESIGN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATMEM__")}
    done = subprocess.run(
        [sys.executable, "-m", "chatmem.cli", "config", "check", str(good)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "ok" in done.stdout and "memory_extraction" in done.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("memory:\n  extraction_batch_size: 0\n")
    done = subprocess.run(
        [sys.executable, "-m", "chatmem.cli", "config", "check", str(bad)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert "memory.extraction_batch_size" in done.stderr


def test_a_store_uri_that_cannot_be_right_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError) as bad:
        ServiceConfig.parse({"memory": {"store": "foo://bar"}})
    assert "memory.store" in str(bad.value) and "unknown store scheme 'foo'" in str(bad.value)
    assert ServiceConfig.parse({"memory": {"store": "sqlite:///x.db"}}).memory.store


@pytest.mark.parametrize(("configured", "expected_s"), [(None, 0.0002), (2.5, 0.0025), (0, None)])
def test_a_serving_process_sets_its_switch_interval(
    configured: float | None, expected_s: float | None
) -> None:
    """``chatmem serve`` and each worker process set the interpreter's switch interval
    (``server.switch_interval_ms``; 0 leaves the interpreter's own)."""
    server = {} if configured is None else {"switch_interval_ms": configured}
    config = ServiceConfig.parse({"server": server})
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.004)
        tune_interpreter(config.server)
        assert sys.getswitchinterval() == pytest.approx(expected_s or 0.004)
    finally:
        sys.setswitchinterval(before)
