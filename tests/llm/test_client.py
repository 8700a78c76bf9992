"""The OpenAI-compatible chat client, against the scripted server on loopback."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from chatmem.errors import ConfigError, LLMResponseError, LLMUnavailableError
from chatmem.llm import ChatModel, ModelConfig, ModelRegistry, ModelRole, OpenAIChatModel
from chatmem.testing import ScriptedOpenAIServer

ASK = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as running:
        yield running


class Sleeps:
    """Records backoff delays instead of sleeping them."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def _model(url: str, sleeps: Sleeps | None = None, **fields: Any) -> OpenAIChatModel:
    config = ModelConfig(endpoint=url, model="scripted", backoff_s=0.01, **fields)
    return OpenAIChatModel(config, sleep=sleeps or Sleeps())


def test_a_completion_sends_the_configured_request(server: ScriptedOpenAIServer) -> None:
    server.script_chat("hello")
    with _model(server.base_url, api_key="secret", max_tokens=50, temperature=0.2) as model:
        assert isinstance(model, ChatModel)
        assert model.complete(ASK) == "hello"
    assert server.chat_requests == [
        {"model": "scripted", "messages": ASK, "max_tokens": 50, "temperature": 0.2}
    ]
    assert server.request_headers[0]["authorization"] == "Bearer secret"


def test_the_api_key_can_come_from_an_environment_variable(
    server: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATMEM_TEST_KEY", "from-env")
    server.script_chat("ok")
    with _model(server.base_url, api_key_env="CHATMEM_TEST_KEY") as model:
        model.complete(ASK)
    assert server.request_headers[0]["authorization"] == "Bearer from-env"


def test_json_asks_for_a_json_object(server: ScriptedOpenAIServer) -> None:
    server.script_chat("{}", "plain")
    with _model(server.base_url) as model:
        model.complete(ASK, json=True)
        model.complete(ASK)
    assert server.chat_requests[0]["response_format"] == {"type": "json_object"}
    assert "response_format" not in server.chat_requests[1]


def test_json_mode_off_never_sends_response_format(server: ScriptedOpenAIServer) -> None:
    server.script_chat("{}")
    with _model(server.base_url, json_mode="off") as model:
        model.complete(ASK, json=True)
    assert "response_format" not in server.chat_requests[0]


def test_auto_json_mode_falls_back_once_and_remembers() -> None:
    with ScriptedOpenAIServer(response_format=False) as server:
        server.script_chat("{}", "{}")
        with _model(server.base_url) as model:
            assert model.complete(ASK, json=True) == "{}"
            assert model.complete(ASK, json=True) == "{}"
    formats = ["response_format" in request for request in server.chat_requests]
    assert formats == [True, False, False]


def test_json_mode_on_does_not_fall_back() -> None:
    with (
        ScriptedOpenAIServer(response_format=False) as server,
        _model(server.base_url, json_mode="on") as model,
        pytest.raises(LLMUnavailableError, match="400") as caught,
    ):
        model.complete(ASK, json=True)
    assert caught.value.status_code == 400
    assert len(server.chat_requests) == 1


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_transient_statuses_are_retried_with_backoff(
    server: ScriptedOpenAIServer, status: int
) -> None:
    server.fail_next(status)
    server.fail_next(status)
    server.script_chat("finally")
    sleeps = Sleeps()
    with _model(server.base_url, sleeps, retries=2) as model:
        assert model.complete(ASK) == "finally"
    assert len(server.chat_requests) == 3
    assert sleeps.delays == [0.01, 0.02]


def test_retry_after_is_honoured_up_to_the_timeout(server: ScriptedOpenAIServer) -> None:
    server.fail_next(429, headers={"Retry-After": "3"})
    server.fail_next(429, headers={"Retry-After": "999"})
    server.script_chat("ok")
    sleeps = Sleeps()
    with _model(server.base_url, sleeps, timeout_s=5) as model:
        model.complete(ASK)
    assert sleeps.delays == [3.0, 5.0]


def test_retries_run_out_into_unavailable(server: ScriptedOpenAIServer) -> None:
    for _ in range(3):
        server.fail_next(503)
    with _model(server.base_url, retries=2) as model, pytest.raises(LLMUnavailableError) as caught:
        model.complete(ASK)
    assert caught.value.status_code == 503
    assert len(server.chat_requests) == 3


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_other_client_errors_are_not_retried(server: ScriptedOpenAIServer, status: int) -> None:
    server.fail_next(status, {"error": {"message": "no"}})
    with _model(server.base_url) as model, pytest.raises(LLMUnavailableError, match=str(status)):
        model.complete(ASK)
    assert len(server.chat_requests) == 1


def test_a_timeout_is_retried_then_unavailable(server: ScriptedOpenAIServer) -> None:
    server.delay_next(2)
    server.delay_next(2)
    with (
        _model(server.base_url, timeout_s=0.2, retries=1) as model,
        pytest.raises(LLMUnavailableError, match="Timeout"),
    ):
        model.complete(ASK)
    assert len(server.chat_requests) == 2


def test_a_timeout_then_an_answer_succeeds(server: ScriptedOpenAIServer) -> None:
    server.delay_next(2)
    server.script_chat("late", "on time")
    with _model(server.base_url, timeout_s=0.2, retries=1) as model:
        # The slow request used the first reply; the retry gets the next one.
        assert model.complete(ASK) == "on time"


def test_connection_refused_is_unavailable_after_retries() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sleeps = Sleeps()
    with (
        _model(f"http://127.0.0.1:{port}/v1", sleeps, retries=2) as model,
        pytest.raises(LLMUnavailableError, match="3 attempt"),
    ):
        model.complete(ASK)
    assert len(sleeps.delays) == 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"unexpected": True}, "not a chat completion"),
        ({"choices": []}, "not a chat completion"),
        ({"choices": [{"message": {"content": None}, "finish_reason": "length"}]}, "length"),
        ({"choices": [{"message": {"content": "  "}}]}, "empty answer"),
    ],
)
def test_unusable_answers_are_response_errors(
    server: ScriptedOpenAIServer, body: Any, message: str
) -> None:
    server.fail_next(200, body)
    with _model(server.base_url) as model, pytest.raises(LLMResponseError, match=message):
        model.complete(ASK)


def test_a_given_http_client_is_used_and_left_open(server: ScriptedOpenAIServer) -> None:
    server.script_chat("shared")
    with httpx.Client(base_url=server.base_url) as http:
        model = OpenAIChatModel(ModelConfig(endpoint=server.base_url, model="m"), http=http)
        assert model.complete(ASK) == "shared"
        model.close()
        assert not model.closed


SEED_ENTRIES = [
    {
        "llm_provider": "vllm",
        "model_role": "memory_rewrite",
        "llm_endpoint": {"address": "qwen", "port": 8000},
        "llm_model_name": "qwen3",
        "llm_timeout_seconds": 30,
        "max_tokens": 100,
        "temperature": 0.1,
    },
    {
        "llm_provider": "vllm",
        "model_role": "memory_extraction",
        "llm_endpoint": {"address": "qwen", "port": 8000},
        "llm_model_name": "qwen3",
        "llm_timeout_seconds": 20,
        "max_tokens": 500,
        "temperature": 0.1,
        "access_key": "sk-secret-123",
    },
]


def test_model_config_reads_the_seed_keys() -> None:
    fields = {key: value for key, value in SEED_ENTRIES[1].items() if key != "model_role"}
    config = ModelConfig.from_mapping(fields)
    assert config.endpoint == "http://qwen:8000/v1"
    assert (config.model, config.timeout_s, config.max_tokens) == ("qwen3", 20, 500)
    assert (config.provider, config.api_key) == ("vllm", "sk-secret-123")
    assert "sk-secret-123" not in repr(config)


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("http://host:9000", "http://host:9000/v1"),
        ("http://host:9000/v1/", "http://host:9000/v1/"),
        ({"address": "h", "port": 1, "scheme": "https"}, "https://h:1/v1"),
        ({"address": "h", "path": "/api"}, "http://h/api/v1"),
    ],
)
def test_the_seed_endpoint_forms(endpoint: Any, expected: str) -> None:
    assert ModelConfig(llm_endpoint=endpoint, model="m").endpoint == expected


def test_our_endpoint_key_is_taken_as_given() -> None:
    assert ModelConfig(endpoint="http://h/openai", model="m").endpoint == "http://h/openai"


@pytest.mark.parametrize(
    "fields",
    [
        {"endpoint": "http://h/v1"},
        {"endpoint": "http://h/v1", "model": "m", "timeout_s": 0},
        {"endpoint": "http://h/v1", "model": "m", "temperature": 3},
        {"endpoint": "http://h/v1", "model": "m", "json_mode": "maybe"},
        {"endpoint": "http://h/v1", "model": "m", "tmeperature": 0.1},
        {"llm_endpoint": {"port": 1}, "model": "m"},
    ],
)
def test_bad_model_configs_are_config_errors(fields: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        ModelConfig(**fields)


def test_the_registry_is_built_from_the_seed_list() -> None:
    with ModelRegistry.from_config({"external_models": SEED_ENTRIES}) as registry:
        assert set(registry.roles()) == {ModelRole.MEMORY_REWRITE, ModelRole.MEMORY_EXTRACTION}
        extraction = registry.get("memory_extraction")
        assert isinstance(extraction, OpenAIChatModel)
        assert extraction is registry.get(ModelRole.MEMORY_EXTRACTION)
        assert extraction.config.max_tokens == 500
        assert registry.get(ModelRole.SUMMARIZATION) is None
        assert registry.config(ModelRole.SUMMARIZATION) is None


def test_the_registry_takes_a_mapping_by_role_and_our_key_names() -> None:
    registry = ModelRegistry.from_config(
        {"summarization": {"endpoint": "http://h/v1", "model_name": "m", "timeout": 5}}
    )
    config = registry.config(ModelRole.SUMMARIZATION)
    assert config is not None
    assert (config.model, config.timeout_s) == ("m", 5)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{**SEED_ENTRIES[0], "model_role": "poetry"}], "unknown model role"),
        ([SEED_ENTRIES[0], SEED_ENTRIES[0]], "given twice"),
        ([{"role": "memory_rewrite", "endpoint": "http://h/v1"}], r"external_models\[0\]"),
    ],
)
def test_bad_registry_configs_are_config_errors(entries: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ModelRegistry.from_config(entries)


def test_the_registry_closes_what_it_built(server: ScriptedOpenAIServer) -> None:
    registry = ModelRegistry(
        {ModelRole.SUMMARIZATION: ModelConfig(endpoint=server.base_url, model="m")}
    )
    model = registry.get(ModelRole.SUMMARIZATION)
    assert isinstance(model, OpenAIChatModel)
    registry.close()
    assert model.closed
    with pytest.raises(LLMUnavailableError, match="closed"):
        model.complete(ASK)
    rebuilt = registry.get(ModelRole.SUMMARIZATION)
    assert isinstance(rebuilt, OpenAIChatModel)
    assert rebuilt is not model
    rebuilt.close()
