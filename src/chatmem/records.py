"""Typed values that cross every layer: the memory record, the filter, search results.

The record follows SPEC L1. It is a pydantic model because it is validated at the edges
(library calls, imports, the service) and serialised to JSON by every backend.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Collection
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, NamedTuple, Self

import numpy as np
import numpy.typing as npt
import pydantic
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from chatmem import checks
from chatmem.errors import ValidationError
from chatmem.strict_json import INT64_MAX

#: Longest text (in characters) one memory may hold.
MAX_TEXT_CHARS = 32_000
#: Largest free-form metadata, serialised as JSON, in characters.
MAX_METADATA_CHARS = 16_000

Vector = npt.NDArray[np.float32]
JsonScalar = str | int | float | bool | None
Unit = Annotated[float, Field(ge=0.0, le=1.0)]
NonEmpty = Annotated[str, Field(min_length=1, max_length=256)]

_JSON_OBJECT: pydantic.TypeAdapter[dict[str, Any]] = pydantic.TypeAdapter(dict[str, Any])
_METADATA_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


class MemoryType(StrEnum):
    SEMANTIC = "semantic"
    EPISODIC = "episodic"
    PROCEDURAL = "procedural"
    PREFERENCE = "preference"
    PROFILE = "profile"
    REFLECTIVE = "reflective"


class Scope(StrEnum):
    PRIVATE = "private"
    SHARED = "shared"
    PUBLIC = "public"


class Source(StrEnum):
    EXPLICIT_USER_INPUT = "explicit_user_input"
    IMPLICIT_INFERENCE = "implicit_inference"
    SYSTEM_GENERATED = "system_generated"
    EXTERNAL_DATA = "external_data"
    CORRECTED_MEMORY = "corrected_memory"


class RelationType(StrEnum):
    RELATED_TO = "related_to"
    UPDATES = "updates"
    CONTRADICTS = "contradicts"
    PART_OF = "part_of"


class HistoryEvent(StrEnum):
    ADD = "add"
    UPDATE = "update"
    DELETE = "delete"


def utcnow() -> datetime:
    """Now, in UTC, truncated to milliseconds (what every backend stores exactly)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def new_id() -> str:
    return uuid.uuid4().hex


#: The most records one read returns: a page of a list, or a search's ``k``.
MAX_RESULTS = 10_000


def check_count(value: int, field: str) -> int:
    """``value`` as an ``int`` (numpy's too, which a backend cannot bind); refuse a page size
    or a ``k`` outside 1 to ``MAX_RESULTS`` (a ValidationError naming ``field``): past it a
    store's integers overflow, and no caller reads that many at once."""
    return checks.whole(
        value, field, low=1, high=MAX_RESULTS, message=f"must be 1 to {MAX_RESULTS}"
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def to_ms(moment: datetime) -> int:
    """Milliseconds since the epoch (a naive time is UTC), counted in whole numbers: a
    float's ``timestamp() * 1000`` is a millisecond off for some times near the year 9999."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _ONE_MS


def from_ms(ms: int) -> datetime:
    """The UTC time ``ms`` milliseconds after the epoch, exactly (see ``to_ms``)."""
    return _EPOCH + timedelta(milliseconds=ms)


def _to_utc_ms(value: datetime | None) -> datetime | None:
    return None if value is None else utc_ms(value)


def utc_ms(value: datetime) -> datetime:
    """``value`` in UTC, to the whole millisecond (a naive time is taken as UTC). A
    ValueError (a validation error in a model) for a time that UTC cannot hold, such as
    9999-12-31T23:59:59-14:00."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        value = value.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of range once converted to UTC") from None
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


#: The first and the last moments a time can hold, to the millisecond.
EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = utc_ms(datetime.max.replace(tzinfo=UTC))


def shifted(moment: datetime, by: timedelta) -> datetime:
    """``moment`` moved by ``by``, held at ``EARLIEST`` or ``LATEST`` where it would leave
    the calendar: a time a user gave (9999-12-31T23:59:59.999Z) is a bound like any other,
    and a millisecond or a week from it must not raise ``OverflowError``."""
    try:
        return moment + by
    except OverflowError:
        return LATEST if by > timedelta(0) else EARLIEST


#: The validation context of a record a store reads back (``MemoryRecord.stored``): it was
#: validated when it was written, so the checks written in Python (times made UTC to the
#: millisecond, metadata's shape and size, a blank text, the validity interval) are not
#: run again. pydantic still checks every field's type and bounds. Skipping them took a
#: LoCoMo record's parse from 20 to 14 us; parsing the records a search reads was the
#: largest share of the interpreter lock under load (issue 14).
_STORED: dict[str, bool] = {"stored": True}


def _stored(info: ValidationInfo) -> bool:
    return info.context is _STORED


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class _Checked(_Model):
    """A model whose constructor and ``model_validate``/``model_validate_json`` raise
    chatmem's ValidationError instead of pydantic's."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except pydantic.ValidationError as exc:
            raise validation_error(exc) from None

    # pydantic calls a model's own ``__init__`` when it validates a dict or JSON into the
    # model: JSON was first turned into Python objects, then validated from those through
    # ``__init__`` (ten stored records took 0.61 ms to read, 0.39 ms without). Marked as
    # its base ``__init__``, it is called only by a constructor call, and the two
    # ``model_validate`` methods below translate the errors instead.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> Self:
        try:
            return super().model_validate(obj, **options)
        except pydantic.ValidationError as exc:
            raise validation_error(exc) from None

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **options: Any) -> Self:
        try:
            return super().model_validate_json(json_data, **options)
        except pydantic.ValidationError as exc:
            raise validation_error(exc) from None

    @classmethod
    def checked(cls, data: Any, field: str = "") -> Self:
        """``model_validate`` that names the offending field under ``field``."""
        try:
            return super().model_validate(data)
        except pydantic.ValidationError as exc:
            raise validation_error(exc, field) from None
        except ValidationError as exc:
            path = ".".join(filter(None, [field, exc.field]))
            raise ValidationError(exc.message, field=path or None) from None


class Content(_Model):
    raw: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    summary: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    structured: dict[str, Any] | None = None

    @field_validator("raw")
    @classmethod
    def _not_blank(cls, value: str, info: ValidationInfo) -> str:
        if not _stored(info) and not value.strip():
            raise ValueError("text is blank")
        return value


class EmbeddingInfo(_Model):
    model: str
    dimension: int = Field(gt=0)


class MemoryMetadata(_Model):
    importance: Unit = 0.5
    confidence: Unit = 1.0
    tags: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=64
    )
    source: Source = Source.EXPLICIT_USER_INPUT
    version: int = Field(default=1, ge=1, le=INT64_MAX)


class TimeInfo(_Model):
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    last_accessed: datetime | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    decay_score: Unit = 1.0
    #: When the memory is forgotten (a TTL): from this moment no read returns it, and the
    #: decay sweep deletes it (history reason ``"expired"``). Unlike ``valid_to`` (a fact
    #: no longer true, kept and answerable with ``Filter.valid_at``), nothing keeps it.
    expires_at: datetime | None = None

    @field_validator(
        "created_at", "updated_at", "last_accessed", "valid_from", "valid_to", "expires_at"
    )
    @classmethod
    def _aware_ms(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        # A stored time was made UTC to the millisecond when it was written ("...Z" reads
        # back with pydantic's own UTC tzinfo, equal to datetime.UTC).
        return value if _stored(info) else _to_utc_ms(value)

    @model_validator(mode="after")
    def _valid_interval(self, info: ValidationInfo) -> TimeInfo:
        if _stored(info):
            return self
        if self.valid_from and self.valid_to and self.valid_to < self.valid_from:
            raise ValueError("valid_to is before valid_from")
        return self

    def expired(self, now: datetime) -> bool:
        """Whether the memory's TTL has run out at ``now``."""
        return self.expires_at is not None and self.expires_at <= now


class Relation(_Model):
    type: RelationType
    target_id: NonEmpty


class AccessControl(_Model):
    visibility: Scope = Scope.PRIVATE
    allowed_users: list[NonEmpty] = Field(default_factory=list)
    allowed_roles: list[NonEmpty] = Field(default_factory=list)


class Context(_Model):
    """How a memory was said, indexed for retrieval beside its text but never shown as it:
    who said it, and the messages just before and after it in the conversation."""

    speaker: str | None = Field(default=None, max_length=256)
    before: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    after: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)


class MemoryRecord(_Checked):
    """One long-term memory (SPEC L1). ``user_metadata`` is free-form and round-trips."""

    id: NonEmpty = Field(default_factory=new_id)
    tenant_id: NonEmpty = "default"
    user_id: NonEmpty
    agent_id: NonEmpty | None = None
    project_id: NonEmpty | None = None
    session_id: NonEmpty | None = None
    type: MemoryType = MemoryType.SEMANTIC
    scope: Scope = Scope.PRIVATE
    content: Content
    embedding: EmbeddingInfo | None = None
    metadata: MemoryMetadata = Field(default_factory=MemoryMetadata)
    time: TimeInfo = Field(default_factory=TimeInfo)
    access_count: int = Field(default=0, ge=0, le=INT64_MAX)
    relations: list[Relation] = Field(default_factory=list)
    access_control: AccessControl = Field(default_factory=AccessControl)
    provenance: list[NonEmpty] = Field(default_factory=list)
    user_metadata: dict[str, Any] = Field(default_factory=dict)
    #: Where the memory was said (speaker, neighbouring messages), for retrieval only.
    context: Context | None = None

    @field_validator("user_metadata")
    @classmethod
    def _metadata_shape(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if _stored(info):
            return value
        for key in value:
            if not _METADATA_KEY.match(key):
                raise ValueError(f"metadata key {key!r} must match {_METADATA_KEY.pattern}")
        if len(_JSON_OBJECT.dump_json(value)) > MAX_METADATA_CHARS:
            raise ValueError(f"metadata is larger than {MAX_METADATA_CHARS} characters")
        return value

    @property
    def text(self) -> str:
        return self.content.raw

    @classmethod
    def stored(cls, body: str | bytes) -> MemoryRecord:
        """A record as a store wrote it (its JSON ``body``): the checks made when it was
        written are not made again (``_STORED``). Never for JSON from outside a store."""
        return cls.model_validate_json(body, context=_STORED)


class Filter(_Checked):
    """What a read or a bulk delete applies to. Unknown fields are an error.

    ``tenant_id`` always applies. Searches and per-user operations also need ``user_id``;
    ``metadata`` matches ``user_metadata`` keys by equality.

    ``reader_roles`` is who reads (SPEC L7): the roles of the caller. With it set, a memory
    whose ``access_control.allowed_roles`` is not empty matches only when the caller holds
    one of those roles; an empty set reads unrestricted memories only. None (the library's
    own, trusted caller, and the admin) reads everything. Every store applies it in its
    query, so every read path that builds its filter from the caller gets the check.

    ``expired`` is about the TTL (``time.expires_at``), judged at the moment of the call:
    False (the default) matches only memories not expired, so no read ever returns an
    expired one; True only expired ones (what the decay sweep deletes); None both (a forget
    that must leave nothing).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant_id: NonEmpty = "default"
    user_id: NonEmpty | None = None
    agent_id: NonEmpty | None = None
    project_id: NonEmpty | None = None
    session_id: NonEmpty | None = None
    ids: tuple[NonEmpty, ...] | None = None
    types: frozenset[MemoryType] | None = None
    scopes: frozenset[Scope] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    #: Only memories valid at this moment (valid_from <= t < valid_to, open ends allowed):
    #: what was true in the world then, whenever it was said.
    valid_at: datetime | None = None
    #: As of this moment: only what was known then, apart from when it was true. A memory
    #: counts when it was recorded at or before it (``created_at``; for a chat turn, when
    #: it was said) and had not ended by then (``valid_to`` unset or after it: a fact
    #: superseded later was still current). A turn said after the moment is left out,
    #: which ``valid_at`` alone cannot do (a turn is valid from whenever).
    known_at: datetime | None = None
    metadata: dict[str, JsonScalar] | None = None
    reader_roles: frozenset[NonEmpty] | None = None
    expired: bool | None = False

    @field_validator("metadata")
    @classmethod
    def _metadata_keys(cls, value: dict[str, JsonScalar] | None) -> dict[str, JsonScalar] | None:
        for key in value or {}:
            if not _METADATA_KEY.match(key):
                raise ValueError(f"metadata key {key!r} must match {_METADATA_KEY.pattern}")
        return value

    @field_validator("created_after", "created_before", "valid_at", "known_at")
    @classmethod
    def _aware_ms(cls, value: datetime | None) -> datetime | None:
        """UTC, whole milliseconds: the precision every backend stores times at."""
        return _to_utc_ms(value)

    def require_user(self) -> str:
        """The user id; a ValidationError when the filter names none."""
        if self.user_id is None:
            raise ValidationError("is required for this operation", field="filter.user_id")
        return self.user_id

    def matches(self, record: MemoryRecord) -> bool:
        """The reference semantics of a filter; backends must agree with it."""
        checks = (
            record.tenant_id == self.tenant_id,
            self.user_id is None or record.user_id == self.user_id,
            self.agent_id is None or record.agent_id == self.agent_id,
            self.project_id is None or record.project_id == self.project_id,
            self.session_id is None or record.session_id == self.session_id,
            self.ids is None or record.id in self.ids,
            self.types is None or record.type in self.types,
            self.scopes is None or record.scope in self.scopes,
            self.created_after is None or record.time.created_at >= self.created_after,
            self.created_before is None or record.time.created_at < self.created_before,
            self.valid_at is None or _valid_at(record.time, self.valid_at),
            self.known_at is None or _known_at(record.time, self.known_at),
            all(record.user_metadata.get(k) == v for k, v in (self.metadata or {}).items()),
            self.may_read(record),
            self.expired is None or record.time.expired(utcnow()) == self.expired,
        )
        return all(checks)

    def may_read(self, record: MemoryRecord) -> bool:
        """Whether the reader (``reader_roles``) may see ``record`` (SPEC L7)."""
        return roles_open(self.reader_roles, record.access_control.allowed_roles)


def roles_open(reader_roles: AbstractSet[str] | None, allowed_roles: Collection[str]) -> bool:
    """The rule of SPEC L7: what names ``allowed_roles`` is read only by a reader holding one
    of them; no roles named, anyone reads it; ``reader_roles`` None (the library itself,
    the admin) reads everything. ``Filter`` and the service's visibility checks share it."""
    return reader_roles is None or not allowed_roles or not reader_roles.isdisjoint(allowed_roles)


def _valid_at(time: TimeInfo, moment: datetime) -> bool:
    starts = time.valid_from is None or time.valid_from <= moment
    ends = time.valid_to is None or moment < time.valid_to
    return starts and ends


def _known_at(time: TimeInfo, moment: datetime) -> bool:
    return time.created_at <= moment and (time.valid_to is None or moment < time.valid_to)


class Entry(NamedTuple):
    """A record with its vector, as written to a store."""

    record: MemoryRecord
    vector: Vector


class Candidate(NamedTuple):
    """One memory a store search found, with the scores the store computed for it.

    ``vector_score`` is the cosine similarity to the query vector; when the query has a
    vector, every candidate carries one (keyword-only finds too). ``keyword_score`` is the
    BM25 score (higher is better) for the keyword half's finds, else None.
    """

    id: str
    vector_score: float | None
    keyword_score: float | None


class SearchResult(BaseModel):
    """One ranked answer to a search. ``score`` is the fused score in [0, 1]."""

    model_config = ConfigDict(frozen=True)

    record: MemoryRecord
    score: float
    vector_score: float | None = None
    keyword_score: float | None = None


class HistoryEntry(BaseModel):
    """One change to a memory: what it was before and after."""

    model_config = ConfigDict(frozen=True)

    memory_id: str
    version: int
    event: HistoryEvent
    old: MemoryRecord | None
    new: MemoryRecord | None
    reason: str | None = None
    at: datetime


class Page(NamedTuple):
    records: list[MemoryRecord]
    next_cursor: str | None


def validation_error(exc: pydantic.ValidationError, prefix: str = "") -> ValidationError:
    """Turn pydantic's error into chatmem's, naming the first offending field."""
    first = exc.errors()[0]
    path = ".".join(str(part) for part in first["loc"])
    field = f"{prefix}.{path}" if prefix and path else (prefix or path or None)
    return ValidationError(first["msg"], field=field)
