"""The service's configuration: one YAML file shaped like the design's ``memory:`` section,
with environment overrides, validated at start with errors that name the key (SPEC A4).

The file (every key optional; these are the defaults)::

    memory:
      enabled: true
      auto_store: true                    # queue extraction after each chat turn
      store: null                         # a store URI; null: $CHATMEM_STORE or the data dir
      milvus: {address: null, collection: chatmem, dimension: 384}   # the design's shape
      embedding: {model: all-MiniLM-L6-v2, dimension: 384, query_model: fast, document_model: fast}
      default_retrieval_limit: 5
      default_similarity_threshold: 0.6
      extraction_batch_size: 10           # user turns between extractions
      search_budget_ms: 50
      memory_tokens: 1000                 # budget of the injected memories
      sessions: {store: null, idle_minutes: 30, log_cache_mib: 32}
      external_models: []                 # the design's list, by model_role
    upstream: {base_url: null, api_key_env: null, timeout_s: 60,
               ready_timeout_s: 2, ready_cache_s: 5}   # /readyz probes the upstream
    server:
      host: 127.0.0.1
      port: 8080
      workers: 1
      data_dir: null
      max_responses: 10000                # per tenant, for previous_response_id chains
      responses_memory_mib: 64            # their memory, when there is no service database
      metrics: {enabled: true, listen: null, key_env: null}   # listen: "127.0.0.1:9464"
    auth: {anonymous_tenant: default, admin_key_env: null, keys: []}
    webhooks: {session_end: null}         # {url, secret_env, max_attempts, timeout_s}
    maintenance:                          # lifecycle jobs; null interval: never scheduled
      enabled: true
      decay_every_minutes: 60             # TTL expiry and the decay sweep (SPEC L5)
      quota_every_minutes: 15             # runs only with max_memories_per_user (L8)
      consolidate_every_hours: null       # e.g. 24 (L10)
      reflect_every_hours: null           # e.g. 24 (L10)
      decay_threshold: 0.2
      max_memories_per_user: null
      lease_minutes: 10                   # a dead replica's job is free again after this
    log_level: info
    log_format: text                      # json: one object per line

``external_models`` may also sit at the top level, as in the design. An environment variable
``CHATMEM__SECTION__KEY=value`` overrides ``section.key`` (the value is read as YAML, so
``CHATMEM__MEMORY__DEFAULT_RETRIEVAL_LIMIT=8`` is a number).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from chatmem.errors import ConfigError
from chatmem.llm.client import ModelRegistry

#: Prefix of the environment variables that override config keys.
ENV_PREFIX = "CHATMEM__"

LOCAL_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
LOCAL_EMBEDDING_DIMENSION = 384


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MilvusSection(_Section):
    """The design's Milvus block; ``address`` set makes it the store."""

    address: str | None = None
    collection: str = Field(default="chatmem", min_length=1)
    dimension: int = Field(default=LOCAL_EMBEDDING_DIMENSION, ge=1)


class EmbeddingSection(_Section):
    """The local MiniLM by default; with ``base_url``, an OpenAI-compatible endpoint."""

    model: str = LOCAL_EMBEDDING_MODEL
    dimension: int = Field(default=LOCAL_EMBEDDING_DIMENSION, ge=1)
    base_url: str | None = None
    api_key_env: str | None = None
    #: The local model's query path: ``fast`` (a dynamic-int8 copy, about half the CPU) or
    #: ``exact`` (the packaged model).
    query_model: Literal["fast", "exact"] = "fast"
    #: The local model for memories: ``fast`` (the same copy, one memory per call: a single
    #: add in about half the time, the same LoCoMo recall) or ``exact`` (the packaged model).
    document_model: Literal["fast", "exact"] = "fast"

    @model_validator(mode="after")
    def _local_is_minilm(self) -> EmbeddingSection:
        if self.base_url is None:
            if self.model != LOCAL_EMBEDDING_MODEL:
                raise ValueError(
                    f"model: only {LOCAL_EMBEDDING_MODEL} runs locally; set base_url for "
                    f"{self.model!r}"
                )
            if self.dimension != LOCAL_EMBEDDING_DIMENSION:
                raise ValueError(
                    f"dimension: {LOCAL_EMBEDDING_MODEL} gives {LOCAL_EMBEDDING_DIMENSION}, "
                    f"not {self.dimension}"
                )
        return self


class SessionsSection(_Section):
    #: A session store URI (``sqlite:///…``, ``redis://…``, ``memory://``); None: the
    #: SQLite file of the memory store, or memory when that store is not SQLite.
    store: str | None = None
    #: A session quiet this long is ended (its summary stored, the webhook sent).
    idle_minutes: float = Field(default=30.0, gt=0)
    #: Messages of a session kept before the oldest are summarised (the short-term window).
    max_turns: int = Field(default=40, ge=2)
    #: Memory for the session logs kept between requests (MiB); a session past it is read
    #: from the store at each request instead.
    log_cache_mib: float = Field(default=32.0, ge=0)


class MemorySection(_Section):
    enabled: bool = True
    auto_store: bool = True
    store: str | None = None
    milvus: MilvusSection = Field(default_factory=MilvusSection)
    embedding: EmbeddingSection = Field(default_factory=EmbeddingSection)
    default_retrieval_limit: int = Field(default=5, ge=1, le=100)
    default_similarity_threshold: float = Field(default=0.6, ge=0.0, le=1.0)
    extraction_batch_size: int = Field(default=10, ge=1, le=1000)
    search_budget_ms: float = Field(default=50.0, gt=0)
    memory_tokens: int = Field(default=1000, ge=0)
    sessions: SessionsSection = Field(default_factory=SessionsSection)
    external_models: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("store")
    @classmethod
    def _known_store(cls, value: str | None) -> str | None:
        """A URI that cannot name a store (an unknown scheme, an empty path) is a mistake in
        the configuration, not a store that is down: refused here, before anything starts."""
        if value is not None:
            from chatmem.stores import check_store_uri

            try:
                check_store_uri(value)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _dimensions_agree(self) -> MemorySection:
        if self.milvus.address is not None and self.milvus.dimension != self.embedding.dimension:
            raise ValueError(
                f"milvus.dimension ({self.milvus.dimension}) must match embedding.dimension "
                f"({self.embedding.dimension})"
            )
        return self

    def store_uri(self) -> str | None:
        """The store to open: ``store``, else the design's Milvus block, else None (default)."""
        if self.store is not None:
            return self.store
        if self.milvus.address is not None:
            address = self.milvus.address
            scheme = "" if "://" in address else "milvus://"
            return f"{scheme}{address}?prefix={self.milvus.collection}"
        return None


class UpstreamSection(_Section):
    """The model chat requests are forwarded to (an OpenAI-compatible ``/v1`` base URL)."""

    base_url: str | None = None
    api_key_env: str | None = None
    #: Forward the caller's Authorization header when no key is configured here.
    pass_authorization: bool = False
    timeout_s: float = Field(default=60.0, gt=0)
    #: ``/readyz`` asks the upstream for its models, waiting this long (seconds)...
    ready_timeout_s: float = Field(default=2.0, gt=0, le=60)
    #: ...and reuses the answer this long, so probes never load the upstream (seconds).
    ready_cache_s: float = Field(default=5.0, ge=0, le=600)

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value else value


class MetricsSection(_Section):
    """Where the Prometheus metrics are served.

    On the service's own port by default, where they need the admin key or ``key`` when
    ``auth.anonymous_tenant`` is null (keys required); with ``listen`` (``host:port``) only
    there, with no key, for a scraper on a private address; or nowhere."""

    enabled: bool = True
    listen: str | None = None
    #: A key that may read ``/metrics`` and nothing else (the admin key always may).
    key: str | None = Field(default=None, min_length=16, repr=False)
    key_env: str | None = None

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None:
            return value
        host, colon, port = value.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("must be host:port, such as 127.0.0.1:9464")
        return value

    def address(self) -> tuple[str, int] | None:
        """``listen`` as (host, port); None when metrics are served on the main port."""
        if self.listen is None:
            return None
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


class ServerSection(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    #: Holds service.db (keys, response chains, the extraction queue, sessions) and, when
    #: ``memory.store`` is not set, the memory store chatmem.db. None: $XDG_DATA_HOME/chatmem.
    data_dir: str | None = None
    #: Processes serving requests (each with its own runtime over the same files).
    workers: int = Field(default=1, ge=1, le=64)
    #: Completed responses kept for ``previous_response_id`` chains, per tenant.
    max_responses: int = Field(default=10_000, ge=1)
    #: At a stop (SIGTERM, Ctrl-C), how long requests in flight and then the turns being
    #: stored after their answers get before the stores close (seconds).
    shutdown_grace_s: float = Field(default=10.0, ge=0, le=600)
    #: Without a service database, the responses kept in memory take at most this (MiB).
    responses_memory_mib: float = Field(default=64.0, gt=0)
    #: How long a serving process's thread may hold the interpreter lock while another
    #: waits for it (``sys.setswitchinterval``, ms; 0: Python's own, 5 ms). A search gives
    #: the lock up in each model call and SQLite read and waits up to this long to take it
    #: back from the HTTP threads: under 16 clients on 2 cores memory was on for more
    #: answers at 0.2 than at 5 (docs/benchmarks.md, "Reads that keep the interpreter lock").
    switch_interval_ms: float = Field(default=0.2, ge=0, le=100)
    metrics: MetricsSection = Field(default_factory=MetricsSection)

    @model_validator(mode="after")
    def _one_metrics_listener(self) -> ServerSection:
        if self.metrics.listen is not None and self.workers > 1:
            raise ValueError(
                "metrics.listen: needs workers 1 (each worker process counts on its own)"
            )
        return self


class KeyEntry(_Section):
    """A key given in the file (keys made through the admin API live in the database)."""

    key: str | None = Field(default=None, min_length=16, repr=False)
    key_env: str | None = None
    tenant: str = Field(min_length=1)
    roles: list[str] = Field(default_factory=list)
    name: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> KeyEntry:
        if (self.key is None) == (self.key_env is None):
            raise ValueError("give exactly one of key and key_env")
        return self


class AuthSection(_Section):
    #: The tenant of requests that carry no key; None makes a key required everywhere.
    anonymous_tenant: str | None = "default"
    admin_key: str | None = Field(default=None, min_length=16, repr=False)
    admin_key_env: str | None = None
    keys: list[KeyEntry] = Field(default_factory=list)


class WebhookTarget(_Section):
    url: str
    secret: str | None = Field(default=None, repr=False)
    secret_env: str | None = None
    max_attempts: int = Field(default=5, ge=1, le=20)
    timeout_s: float = Field(default=5.0, gt=0)
    backoff_s: float = Field(default=0.5, gt=0)

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value


class WebhooksSection(_Section):
    session_end: WebhookTarget | None = None


class MaintenanceSection(_Section):
    """When the lifecycle jobs run (``chatmem.server.maintenance``). With several replicas
    one of them runs each job per interval. An interval of null never schedules its job
    (it still runs by ``chatmem maintain`` or the admin API)."""

    enabled: bool = True
    decay_every_minutes: float | None = Field(default=60.0, gt=0)
    quota_every_minutes: float | None = Field(default=15.0, gt=0)
    consolidate_every_hours: float | None = Field(default=None, gt=0)
    reflect_every_hours: float | None = Field(default=None, gt=0)
    #: Memories whose decay score falls under this are deleted by the decay job (0: none).
    decay_threshold: float = Field(default=0.2, ge=0.0, le=1.0)
    #: The quota job keeps each user at this many memories at most; None: no quota.
    max_memories_per_user: int | None = Field(default=None, ge=0)
    #: How long a replica holds a job without renewing it before another may take it.
    lease_minutes: float = Field(default=10.0, gt=0)

    def intervals_s(self) -> dict[str, float]:
        """Each scheduled job's interval in seconds, by job name."""
        every = {
            "decay": self.decay_every_minutes and self.decay_every_minutes * 60,
            "quota": self.quota_every_minutes and self.quota_every_minutes * 60,
            "consolidate": self.consolidate_every_hours and self.consolidate_every_hours * 3600,
            "reflect": self.reflect_every_hours and self.reflect_every_hours * 3600,
        }
        return {job: seconds for job, seconds in every.items() if seconds}


class ServiceConfig(_Section):
    memory: MemorySection = Field(default_factory=MemorySection)
    upstream: UpstreamSection = Field(default_factory=UpstreamSection)
    server: ServerSection = Field(default_factory=ServerSection)
    auth: AuthSection = Field(default_factory=AuthSection)
    webhooks: WebhooksSection = Field(default_factory=WebhooksSection)
    maintenance: MaintenanceSection = Field(default_factory=MaintenanceSection)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    #: ``json``: one object per line with the records' fields (batch ids, users, counts).
    log_format: Literal["text", "json"] = "text"

    @model_validator(mode="before")
    @classmethod
    def _models_at_top(cls, data: Any) -> Any:
        """The design puts ``external_models`` beside ``memory``; both places are read."""
        if isinstance(data, Mapping) and "external_models" in data:
            data = dict(data)
            models = data.pop("external_models")
            memory = dict(data.get("memory") or {})
            if memory.get("external_models"):
                raise ValueError("external_models is given twice (top level and memory)")
            memory["external_models"] = models
            data["memory"] = memory
        return data

    def models(self) -> ModelRegistry:
        """The external models by role (raises ConfigError naming the entry)."""
        return ModelRegistry.from_config(self.memory.external_models)

    @classmethod
    def parse(cls, data: Any, *, source: str = "config") -> ServiceConfig:
        """Validate a mapping; a ConfigError names the first bad key (``memory.x.y``)."""
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: the top level must be a mapping")
        try:
            config = cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{source}: {_first_error(exc)}") from None
        config.models()  # external_models are checked at start, not at first use
        return config


def load_config(
    path: str | Path | None = None, *, environ: Mapping[str, str] | None = None
) -> ServiceConfig:
    """Read ``path`` (YAML; None: defaults only), apply ``CHATMEM__…`` overrides, validate."""
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the top level must be a mapping")
        data = loaded or {}
    apply_env(data, os.environ if environ is None else environ)
    return ServiceConfig.parse(data, source=source)


def apply_env(data: dict[str, Any], environ: Mapping[str, str]) -> None:
    """Set ``section.key`` from each ``CHATMEM__SECTION__KEY`` variable (values read as YAML)."""
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or name == ENV_PREFIX:
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        if any(not part for part in path):
            raise ConfigError(f"{name}: empty key in the variable's name")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"{name}: {part} is not a section")
            node = child
        node[path[-1]] = value


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"] if part != "__root__")
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    return f"{where}: {message}" if where else message


__all__ = [
    "ENV_PREFIX",
    "AuthSection",
    "EmbeddingSection",
    "KeyEntry",
    "MaintenanceSection",
    "MemorySection",
    "MetricsSection",
    "ServiceConfig",
    "UpstreamSection",
    "WebhookTarget",
    "apply_env",
    "load_config",
]
