"""An OpenAI-compatible chat client (vLLM, Ollama, llama.cpp, OpenAI) and models by role.

``OpenAIChatModel`` posts to ``{endpoint}/chat/completions`` with httpx, retries what can
succeed on a second try (connection errors, timeouts, 429, 5xx) with exponential backoff, and
asks for JSON with ``response_format`` where the server accepts it. ``ModelRegistry`` maps a
role (memory_extraction, memory_rewrite, summarization) to a configured model; a role with no
model means the feature runs without an LLM.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Self

import httpx
import pydantic
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from chatmem.errors import ConfigError, LLMResponseError, LLMUnavailableError
from chatmem.llm.base import ChatModel, ModelRole

logger = logging.getLogger("chatmem.llm")

JsonMode = Literal["auto", "on", "off"]

_RETRYABLE_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


class ModelConfig(BaseModel):
    """One model endpoint. Accepts chatmem's field names and the seed's (``llm_model_name``,
    ``llm_endpoint: {address, port}``, ``access_key``, ``llm_timeout_seconds``…).

    ``endpoint`` is the API base URL, ``/v1`` included (``http://qwen:8000/v1``); the seed's
    ``llm_endpoint`` names a host, so ``/v1`` is added to it. ``json_mode``: "on" always sends
    ``response_format``, "off" never does, "auto" sends it and stops when the server refuses it.
    Invalid values raise ``ConfigError``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    endpoint: str = Field(
        min_length=1, validation_alias=AliasChoices("endpoint", "base_url", "llm_endpoint")
    )
    model: str = Field(
        min_length=1, validation_alias=AliasChoices("model", "model_name", "llm_model_name")
    )
    api_key: str | None = Field(
        default=None, repr=False, validation_alias=AliasChoices("api_key", "access_key")
    )
    #: Name of an environment variable holding the key, read when a client is built.
    api_key_env: str | None = Field(
        default=None, validation_alias=AliasChoices("api_key_env", "access_key_env")
    )
    timeout_s: float = Field(
        default=30.0,
        gt=0,
        validation_alias=AliasChoices("timeout_s", "timeout", "llm_timeout_seconds"),
    )
    max_tokens: int = Field(default=1024, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    retries: int = Field(default=2, ge=0, le=10)
    backoff_s: float = Field(default=0.5, ge=0.0)
    json_mode: JsonMode = "auto"
    #: The seed's ``llm_provider`` (vllm, ollama, openai…): informational, the wire is the same.
    provider: str | None = Field(
        default=None, validation_alias=AliasChoices("provider", "llm_provider")
    )

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except pydantic.ValidationError as exc:
            raise _config_error(exc) from None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Self:
        """Build from a config mapping (our keys or the seed's); raises ``ConfigError``."""
        return cls(**dict(data))

    @model_validator(mode="before")
    @classmethod
    def _seed_endpoint(cls, data: Any) -> Any:
        """The seed writes ``llm_endpoint: {address, port}`` (a host, no ``/v1``)."""
        if not isinstance(data, dict) or "llm_endpoint" not in data:
            return data
        endpoint = data["llm_endpoint"]
        if isinstance(endpoint, Mapping):
            endpoint = _url_of_parts(endpoint)
        if isinstance(endpoint, str) and not endpoint.rstrip("/").endswith("/v1"):
            endpoint = endpoint.rstrip("/") + "/v1"
        return {**data, "llm_endpoint": endpoint}

    def resolved_api_key(self) -> str | None:
        """``api_key``, else the value of the ``api_key_env`` variable, else None."""
        if self.api_key:
            return self.api_key
        return os.environ.get(self.api_key_env) if self.api_key_env else None


class OpenAIChatModel:
    """A :class:`ChatModel` over ``POST {endpoint}/chat/completions``.

    Pass ``http`` to reuse a client (its base URL must be the endpoint); otherwise one is made
    and :meth:`close` closes it. Raises ``LLMUnavailableError`` when no answer came after the
    retries (or at once for a 4xx other than 429), ``LLMResponseError`` for an empty answer.
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        http: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self._owns_http = http is None
        self._http = http if http is not None else _new_http_client(config)
        self._sleep = sleep
        # Learned in "auto" mode the first time the server refuses response_format.
        self._response_format_ok = config.json_mode != "off"

    def complete(self, messages: Sequence[dict[str, Any]], *, json: bool = False) -> str:
        """Send ``messages`` and return the answer's text."""
        if self.closed:
            raise LLMUnavailableError(f"{self} is closed")
        body = self._body(messages, json=json)
        response = self._post_with_retries(body)
        if self._refused_response_format(response, body):
            logger.info("%s refuses response_format; asking for JSON in the prompt only", self)
            self._response_format_ok = False
            del body["response_format"]
            response = self._post_with_retries(body)
        if response.is_error:
            raise LLMUnavailableError(
                f"{self} answered HTTP {response.status_code}: {_excerpt(response.text)}",
                status_code=response.status_code,
            )
        return _answer_text(response)

    def close(self) -> None:
        """Close the HTTP client, when this model made it."""
        if self._owns_http:
            self._http.close()

    @property
    def closed(self) -> bool:
        """Whether the HTTP client is closed; calling a closed model is ``LLMUnavailableError``."""
        return self._http.is_closed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.config.model!r} at {self.config.endpoint})"

    def _body(self, messages: Sequence[dict[str, Any]], *, json: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": list(messages),
            "max_tokens": self.config.max_tokens,
            "temperature": self.config.temperature,
        }
        if json and self._response_format_ok:
            body["response_format"] = {"type": "json_object"}
        return body

    def _refused_response_format(self, response: httpx.Response, body: dict[str, Any]) -> bool:
        return (
            self.config.json_mode == "auto"
            and "response_format" in body
            and response.status_code == 400
            and "response_format" in response.text
        )

    def _post_with_retries(self, body: dict[str, Any]) -> httpx.Response:
        """POST ``body``; retry connection errors, timeouts, 429 and 5xx with backoff.

        Returns the last response (which may be an error status that is not retried).
        """
        attempts = self.config.retries + 1
        for attempt in range(attempts):
            last_try = attempt == attempts - 1
            try:
                response = self._http.post("/chat/completions", json=body)
            except _RETRYABLE_ERRORS as exc:
                if last_try:
                    raise LLMUnavailableError(
                        f"{self} failed after {attempts} attempt(s): {exc!r}"
                    ) from exc
                logger.warning("%s: %r; retrying", self, exc)
                self._sleep(self._backoff(attempt, None))
                continue
            except httpx.HTTPError as exc:  # a bad URL or protocol: another try cannot help
                raise LLMUnavailableError(f"{self} cannot be called: {exc!r}") from exc
            if last_try or not _retryable_status(response.status_code):
                return response
            logger.warning("%s answered HTTP %d; retrying", self, response.status_code)
            self._sleep(self._backoff(attempt, response))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _backoff(self, attempt: int, response: httpx.Response | None) -> float:
        """Exponential backoff, or the server's Retry-After when longer (capped at the timeout)."""
        delay = self.config.backoff_s * 2.0**attempt
        asked = _retry_after_s(response) if response is not None else None
        if asked is not None:
            delay = max(delay, min(asked, self.config.timeout_s))
        return delay


class ModelRegistry:
    """Models by role. ``get(role)`` returns None for a role with no configured model.

    Clients are built on first use and shared; :meth:`close` closes them.
    """

    def __init__(
        self,
        configs: Mapping[ModelRole | str, ModelConfig] | None = None,
        *,
        factory: Callable[[ModelConfig], ChatModel] = OpenAIChatModel,
    ) -> None:
        self._configs = {_role(role): config for role, config in (configs or {}).items()}
        self._factory = factory
        self._models: dict[ModelRole, ChatModel] = {}

    @classmethod
    def from_config(
        cls,
        data: Iterable[Mapping[str, Any]] | Mapping[str, Any],
        *,
        factory: Callable[[ModelConfig], ChatModel] = OpenAIChatModel,
    ) -> ModelRegistry:
        """Build from the seed's ``external_models`` list (each entry names its ``role`` or
        ``model_role``), from a mapping holding that list under ``external_models``, or from
        a mapping of role to entry. Raises ``ConfigError``."""
        configs: dict[ModelRole | str, ModelConfig] = {}
        for where, role, fields in _entries(data):
            if role in configs:
                raise ConfigError(f"{where}: role {role.value!r} given twice")
            try:
                configs[role] = ModelConfig.from_mapping(fields)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
        return cls(configs, factory=factory)

    def config(self, role: ModelRole | str) -> ModelConfig | None:
        """The configuration for ``role``, if any."""
        return self._configs.get(_role(role))

    def get(self, role: ModelRole | str) -> ChatModel | None:
        """The model for ``role``, built on first use; None when the role has none."""
        key = _role(role)
        if key not in self._models and key in self._configs:
            self._models[key] = self._factory(self._configs[key])
        return self._models.get(key)

    def roles(self) -> list[ModelRole]:
        """The roles that have a model."""
        return list(self._configs)

    def close(self) -> None:
        """Close every client built so far."""
        for model in self._models.values():
            close = getattr(model, "close", None)
            if callable(close):
                close()
        self._models.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _entries(
    data: Iterable[Mapping[str, Any]] | Mapping[str, Any],
) -> Iterable[tuple[str, ModelRole, dict[str, Any]]]:
    """(where, role, config fields) for each model entry of a registry config."""
    if isinstance(data, Mapping) and "external_models" in data:
        data = data["external_models"]
    if isinstance(data, Mapping):
        for role, entry in data.items():
            yield f"models.{role}", _role(role), dict(entry)
        return
    for index, entry in enumerate(data):
        fields = dict(entry)
        role = _role(fields.pop("role", None) or fields.pop("model_role", None))
        fields.pop("model_role", None)
        yield f"external_models[{index}]", role, fields


def _new_http_client(config: ModelConfig) -> httpx.Client:
    key = config.resolved_api_key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(
        base_url=config.endpoint.rstrip("/"), headers=headers, timeout=config.timeout_s
    )


def _retry_after_s(response: httpx.Response) -> float | None:
    """Retry-After in seconds; None when absent or an HTTP date (our backoff applies)."""
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _retryable_status(status: int) -> bool:
    return status == 429 or status >= 500


def _answer_text(response: httpx.Response) -> str:
    """The first choice's text; ``LLMResponseError`` when there is none."""
    try:
        choice = response.json()["choices"][0]
        content = choice["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise LLMResponseError(
            f"not a chat completion: {exc!r}", raw=_excerpt(response.text)
        ) from exc
    if not isinstance(content, str) or not content.strip():
        reason = choice.get("finish_reason") if isinstance(choice, dict) else None
        raise LLMResponseError(f"the model gave an empty answer (finish_reason={reason})")
    return content


def _url_of_parts(parts: Mapping[str, Any]) -> str:
    address = str(parts.get("address") or parts.get("host") or "")
    if not address:
        raise ConfigError("llm_endpoint needs an address")
    scheme = parts.get("scheme") or ("https" if parts.get("use_tls") else "http")
    port = parts.get("port")
    path = str(parts.get("path") or "")
    return f"{scheme}://{address}{f':{port}' if port else ''}{path}"


def _role(value: object) -> ModelRole:
    try:
        return ModelRole(str(value))
    except ValueError:
        known = ", ".join(role.value for role in ModelRole)
        raise ConfigError(f"unknown model role {value!r} (known: {known})") from None


def _config_error(exc: pydantic.ValidationError) -> ConfigError:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return ConfigError(f"{where}: {first['msg']}" if where else first["msg"])


def _excerpt(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


__all__ = ["JsonMode", "ModelConfig", "ModelRegistry", "OpenAIChatModel"]
