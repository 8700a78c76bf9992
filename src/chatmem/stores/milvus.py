"""The Milvus store (SPEC B1): Milvus Lite on one machine, Milvus standalone or a cluster beyond.

The same client code runs against both. A uri ending in ``.db``, or any other local path,
opens Milvus Lite, an in-process server over a data directory that only one process may open
at a time (closing the last store on it in this process lets another process open it).
``http(s)://host:19530`` (or ``tcp://``, ``unix:``) connects to a server.

Layout (``<prefix>`` defaults to ``chatmem``):

- ``<prefix>_memories``: one row per record, created when an embedding model is bound.
  ``user_key`` (tenant + ``\\x1f`` + user) is the partition key, so a user's search reads only
  that user's partition and tenants never share a key. The filterable fields are scalar
  columns (open ends of the validity interval are sentinels); ``body`` is the full record JSON;
  ``embedding`` is a COSINE FLOAT_VECTOR (FLAT on Lite, which is exact and enough for one
  machine; HNSW with M=16, efConstruction=200 on a server); ``text`` feeds a BM25 function whose
  SPARSE_FLOAT_VECTOR output answers the keyword half of a search. ``tenant_id``,
  ``session_id``, ``type``, ``created_at``, ``valid_from`` and ``valid_to`` carry INVERTED
  scalar indexes (collections created before they were added keep working without them).
  ``expires_at`` (the TTL, ``OPEN_END`` for none) is a column of collections made since TTLs
  exist; Milvus Lite cannot add a column to a collection, so an older collection refuses a
  memory with an ``expires_at`` (export and import into a new one to get it).
- ``<prefix>_history``: one row per add, update and delete, with the record before and after.
- ``<prefix>_meta``: the schema version and the bound embedding model and dimension.

Milvus requires a vector field in every collection, so history and meta carry a 2-dimensional
dummy vector. Every read uses Strong consistency, so a write is visible to the next read.

What Milvus lacks, and what this store does instead:

- **Transactions.** A batch is written with one ``insert`` (or ``upsert``) call, then its
  history rows; if a step fails, what may have been written is deleted (or the previous rows
  restored) before StoreError is raised. A failure of that clean-up is added as a note to the
  error. A bulk delete works in chunks of ``ID_CHUNK`` records; each record is deleted together
  with its history row, so a failed delete may have removed a prefix of the records.
- **Conditional writes.** Version checks (update) and the duplicate-id check (put) read, then
  write. A lock makes that safe between threads of one process; several processes writing the
  same user's memories on one server can still race.
- **ORDER BY.** ``list`` (oldest first, ties by id) reads the ids and creation times of every
  matching record after the cursor, sorts them here, and then reads the bodies of one page: a
  page costs O(matching records), fine per user, slow for a tenant-wide listing of millions.
  Reads past Milvus' 16,384-row query window go through a query iterator.
- **JSON equality with Python's semantics.** ``Filter.metadata`` compares like Python
  (``True == 1 == 1.0``, a missing key equals None). Each record therefore stores canonical
  ``key=value`` terms of its metadata in an ARRAY field, and a filter tests them with
  ``array_contains``. ``user_metadata`` is kept as a JSON field as well, for ad-hoc queries.
- **Large values.** VARCHAR holds at most 65,535 bytes: a record whose JSON is larger is stored
  zlib-compressed; one that is still too large is refused (ValidationError). The keyword text is
  cut at that size.

Full-text search works on Milvus Lite 3.x: ``text`` feeds a BM25 function, searched with the
query's terms. Lite's analyzer has no stemmer, so the text is analysed here (chatmem.text's
words and stop words, Porter stems) and Milvus only splits it, on Lite and server alike.
Lite scores BM25 per segment and reports ``-score`` as the distance where a server reports the
score; keyword hits carry the BM25 score, higher is better, on both.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import importlib
import json
import math
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np

from chatmem import text as textlib
from chatmem.errors import (
    ConfigError,
    ConflictError,
    EmbedderMismatchError,
    NotFoundError,
    StoreError,
    StoreUnavailableError,
    ValidationError,
)
from chatmem.records import (
    Candidate,
    EmbeddingInfo,
    Entry,
    Filter,
    HistoryEntry,
    HistoryEvent,
    MemoryRecord,
    Page,
    Vector,
    from_ms,
    new_id,
    utcnow,
)
from chatmem.stores.base import (
    Capabilities,
    Change,
    MemoryStore,
    SearchQuery,
    Usage,
    cursor_ms,
)

T = TypeVar("T")

SCHEMA_VERSION = 1
#: Milvus' largest VARCHAR, in bytes.
MAX_VARCHAR_BYTES = 65_535
#: Largest offset + limit of one Milvus query, and largest top-k of one search.
QUERY_WINDOW = 16_384
#: Records per ``id in [...]`` expression and per chunk of a bulk delete.
ID_CHUNK = 1_000
#: Rows per batch when a query must be read with an iterator.
SCAN_BATCH = 4_096
#: A 256-character identifier takes at most this many UTF-8 bytes.
ID_BYTES = 1_024
#: Longest metadata term before it is replaced by its hash; most terms in one record.
TERM_BYTES = 512
MAX_TERMS = 4_096
#: HNSW on a server: graph degree, build and search breadth.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 200
HNSW_MIN_EF = 64
#: Scalar fields with an INVERTED index: the filters' and bulk deletes' fields.
SCALAR_INDEXED = (
    "tenant_id",
    "session_id",
    "type",
    "created_at",
    "valid_from",
    "valid_to",
    "expires_at",
)

SEPARATOR = "\x1f"
#: Sentinels for the open ends of a validity interval, in milliseconds.
OPEN_START = -(2**62)
OPEN_END = 2**62
#: An expression no row matches (ids are never empty).
NOTHING = 'id == ""'
_DUMMY_VECTOR = [0.0, 0.0]
_COMPRESSED = "z:"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,200}$")
_SERVER_SCHEMES = ("http://", "https://", "tcp://", "unix:")

#: Milvus' analyzer for the keyword text. The text is analysed here first (words of
#: chatmem.text, stop words dropped, Porter stems), so Milvus Lite (which has no stemmer) and
#: a server index the same terms, and terms that SQLite's FTS5 porter tokenizer would match.
ANALYZER: dict[str, Any] = {"tokenizer": "standard", "filter": ["lowercase"]}
STEMMER = "porter"

_MEMORY_FIELDS = ["id", "body"]
_HISTORY_FIELDS = ["id", "seq", "memory_id", "version", "event", "old", "new", "reason", "at"]


def user_key(tenant_id: str, user_id: str) -> str:
    """The partition of one user of one tenant."""
    return f"{tenant_id}{SEPARATOR}{user_id}"


# -- filter expressions -------------------------------------------------------------------

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def literal(value: str) -> str:
    """A Milvus string literal for ``value``. Any other character is legal inside quotes."""
    return '"' + "".join(_ESCAPES.get(char, char) for char in value) + '"'


def _in(field: str, values: Sequence[str]) -> str:
    if not values:
        return NOTHING
    return f"{field} in [{', '.join(literal(v) for v in values)}]"


def ms_floor(moment: datetime) -> int:
    """Milliseconds since the epoch, rounded down, computed exactly (no float)."""
    return (moment - _EPOCH) // _MS


def ms_ceil(moment: datetime) -> int:
    """Milliseconds since the epoch, rounded up."""
    return -((_EPOCH - moment) // _MS)


def _canonical(value: Any) -> str | None:
    """A form of a JSON value that two values share exactly when Python finds them equal.

    None for values no scalar equals (lists, objects, NaN).
    """
    if value is None:
        return "null"
    if isinstance(value, bool | int):
        return str(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return None


def _term(key: str, canonical: str) -> str:
    term = f"{key}={canonical}"
    if len(term.encode()) > TERM_BYTES:
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        term = f"{key}=#{digest}"
    return term


#: Terms of a memory that names roles (SPEC L7): a mark, and one term per role. No metadata
#: key starts with "#", so these never meet a metadata term.
RESTRICTED_TERM, ROLE_TERM = "#restricted", "#role:"


def access_terms(record: MemoryRecord) -> list[str]:
    """What a record stores for its readers' roles: nothing when it names none."""
    roles = record.access_control.allowed_roles
    return [RESTRICTED_TERM, *(ROLE_TERM + role for role in sorted(set(roles)))] if roles else []


def metadata_terms(metadata: dict[str, Any]) -> list[str]:
    """What a record stores for metadata filters: each key, and ``key=value`` for scalars."""
    terms = []
    for key, value in metadata.items():
        terms.append(key)
        canonical = _canonical(value)
        if canonical is not None:
            terms.append(_term(key, canonical))
    return terms


def _metadata_condition(key: str, value: Any) -> str:
    canonical = _canonical(value)
    if canonical is None:
        return NOTHING
    has_term = f"array_contains(meta_terms, {literal(_term(key, canonical))})"
    if value is None:  # Python: a missing key equals None too.
        return f"{has_term} or not array_contains(meta_terms, {literal(key)})"
    return has_term


def _expiry_condition(expired: bool, expiry: bool) -> str | None:
    if not expiry:
        return NOTHING if expired else None
    now = ms_floor(utcnow())
    return f"expires_at <= {now}" if expired else f"expires_at > {now}"


def filter_expression(scope: Filter, *, expiry: bool = True) -> str:
    """A Milvus boolean expression equivalent to ``scope.matches``. ``expiry``: the
    collection has the ``expires_at`` column (without it, no memory can have expired)."""
    parts = [f"tenant_id == {literal(scope.tenant_id)}"]
    if scope.user_id is not None:
        parts.insert(0, f"user_key == {literal(user_key(scope.tenant_id, scope.user_id))}")
    for field in ("agent_id", "project_id", "session_id"):
        value = getattr(scope, field)
        if value is not None:
            parts.append(f"{field} == {literal(value)}")
    if scope.ids is not None:
        parts.append(_in("id", sorted(set(scope.ids))))
    if scope.types is not None:
        parts.append(_in("type", sorted(t.value for t in scope.types)))
    if scope.scopes is not None:
        parts.append(_in("scope", sorted(s.value for s in scope.scopes)))
    # Stored times are whole milliseconds, so these bounds are exact for any filter moment.
    if scope.created_after is not None:
        parts.append(f"created_at >= {ms_ceil(scope.created_after)}")
    if scope.created_before is not None:
        parts.append(f"created_at < {ms_ceil(scope.created_before)}")
    if scope.valid_at is not None:
        moment = ms_floor(scope.valid_at)
        parts.append(f"valid_from <= {moment} and valid_to > {moment}")
    for key, value in (scope.metadata or {}).items():
        parts.append(_metadata_condition(key, value))
    if scope.expired is not None and (condition := _expiry_condition(scope.expired, expiry)):
        parts.append(condition)
    if scope.reader_roles is not None:
        readable = f"not array_contains(meta_terms, {literal(RESTRICTED_TERM)})"
        if scope.reader_roles:
            held = ", ".join(literal(ROLE_TERM + role) for role in sorted(scope.reader_roles))
            readable += f" or array_contains_any(meta_terms, [{held}])"
        parts.append(readable)
    return " and ".join(f"({part})" for part in parts)


# -- cursors and stored values ------------------------------------------------------------


def _encode_cursor(created_ms: int, memory_id: str) -> str:
    raw = json.dumps([created_ms, memory_id]).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii")


def _decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        created_ms, memory_id = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (ValueError, TypeError) as exc:
        raise ValidationError("is not a cursor this store issued", field="cursor") from exc
    if not isinstance(memory_id, str):
        raise ValidationError("is not a cursor this store issued", field="cursor")
    return cursor_ms(created_ms), memory_id


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _pack(document: str, field: str) -> str:
    """``document`` as it fits a VARCHAR: as is, or compressed."""
    if _utf8_size(document) <= MAX_VARCHAR_BYTES:
        return document
    compressed = zlib.compress(document.encode("utf-8", "surrogatepass"), 9)
    packed = _COMPRESSED + base64.b64encode(compressed).decode("ascii")
    if len(packed) > MAX_VARCHAR_BYTES:
        raise ValidationError(
            f"is too large for the Milvus store ({_utf8_size(document)} bytes of JSON)",
            field=field,
        )
    return packed


def _unpack(stored: str) -> str:
    if stored.startswith(_COMPRESSED):
        return zlib.decompress(base64.b64decode(stored[len(_COMPRESSED) :])).decode(
            "utf-8", "surrogatepass"
        )
    return stored


def _record(stored: str) -> MemoryRecord:
    return MemoryRecord.model_validate_json(_unpack(stored))


def _truncate_utf8(text: str, limit: int) -> str:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def _load_stemmer() -> Any:
    try:
        return importlib.import_module("snowballstemmer")
    except ImportError as exc:
        raise ConfigError(
            "the Milvus store needs snowballstemmer: pip install 'chatmem[milvus]'"
        ) from exc


def _stem(words: Sequence[str]) -> list[str]:
    # A stemmer object keeps state between words: one per call keeps this thread-safe.
    stems: list[str] = _load_stemmer().stemmer(STEMMER).stemWords(list(words))
    return stems


def keyword_document(record: MemoryRecord) -> str:
    """The terms of ``text.index_fields(record)``, as the BM25 function indexes them.

    Milvus has one BM25 field, so the fields are not weighted apart as SQLite's columns are.
    """
    words = [
        w
        for w in textlib.words("\n".join(textlib.index_fields(record)))
        if w not in textlib.STOP_WORDS
    ]
    return _truncate_utf8(" ".join(_stem(words)), MAX_VARCHAR_BYTES)


def keyword_query(text: str) -> str:
    """The terms of a keyword query, analysed like a record's; "" when it has none."""
    return " ".join(dict.fromkeys(_stem(textlib.query_terms(text))))


def _sort_key(record: MemoryRecord) -> tuple[int, str]:
    return ms_floor(record.time.created_at), record.id


def _chunks(items: Sequence[T], size: int = ID_CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class _Stored(NamedTuple):
    """A memory row as read back for an update: the record and its vector."""

    record: MemoryRecord
    vector: list[float]


# -- connecting -----------------------------------------------------------------------------


def _load_pymilvus() -> Any:
    try:
        return importlib.import_module("pymilvus")
    except ImportError as exc:
        raise ConfigError("the Milvus store needs pymilvus: pip install 'chatmem[milvus]'") from exc


def _resolve_uri(uri: str | Path) -> tuple[str, Path | None]:
    """The uri to hand to pymilvus, and the Milvus Lite data directory if it is local."""
    text = str(uri)
    if text.startswith(_SERVER_SCHEMES):
        return text, None
    path = Path(text).expanduser()
    if path.suffix != ".db":
        path = path / "milvus.db"
    path = path.absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path), path


class _LiteServers:
    """How many open stores use each Milvus Lite directory of this process.

    Milvus Lite runs one server per directory in the process and keeps it (and the directory's
    lock) until exit; the last store to close a directory stops its server, so another process
    can open it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[Path, int] = {}

    def acquire(self, path: Path) -> None:
        with self._lock:
            self._users[path] = self._users.get(path, 0) + 1

    def release(self, path: Path) -> None:
        with self._lock:
            remaining = self._users.get(path, 1) - 1
            if remaining > 0:
                self._users[path] = remaining
                return
            self._users.pop(path, None)
        try:
            manager = importlib.import_module("milvus_lite.server_manager")
        except ImportError:  # pragma: no cover - the server could not have started either
            return
        manager.server_manager_instance.release_server(str(path))


_LITE_SERVERS = _LiteServers()


class MilvusStore(MemoryStore):
    """Memories in Milvus (Lite or server); see the module docstring for the layout."""

    def __init__(
        self,
        uri: str | Path,
        *,
        token: str | None = None,
        db_name: str | None = None,
        collection_prefix: str = "chatmem",
        timeout: float = 30.0,
    ) -> None:
        if not _PREFIX.match(collection_prefix):
            raise ConfigError(
                f"collection prefix {collection_prefix!r} must match {_PREFIX.pattern}"
            )
        self._pm = _load_pymilvus()
        _load_stemmer()  # fail at open, not at the first write
        self._rpc_error: type[BaseException] = importlib.import_module("grpc").RpcError
        self.uri, self._lite_path = _resolve_uri(uri)
        self.capabilities = Capabilities(keyword_search=True, multi_process=self._lite_path is None)
        self._timeout = timeout
        self._memories = f"{collection_prefix}_memories"
        self._history = f"{collection_prefix}_history"
        self._meta = f"{collection_prefix}_meta"
        self._lock = threading.RLock()
        self._last_seq = 0
        self._closed = False
        self._memories_exist = False
        #: Whether the memories collection has the ``expires_at`` column (see the docstring).
        self._expiry = True
        self._client = self._connect(token, db_name)
        try:
            self._embedding = self._prepare()
        except BaseException:  # boundary: close what we opened, then re-raise
            self.close()
            raise

    def _connect(self, token: str | None, db_name: str | None) -> Any:
        if self._lite_path is not None:
            _LITE_SERVERS.acquire(self._lite_path)
        try:
            return self._pm.MilvusClient(
                uri=self.uri, token=token or "", db_name=db_name or "", timeout=self._timeout
            )
        except BaseException as exc:  # boundary: release the path; re-raised or translated
            if self._lite_path is not None:
                _LITE_SERVERS.release(self._lite_path)
            if not isinstance(exc, self._pm.MilvusException):
                raise
            hint = " (is another process using it?)" if self._lite_path is not None else ""
            raise StoreUnavailableError(
                f"cannot open Milvus at {self.uri!r}{hint}: {exc.message}"
            ) from exc

    def _call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call pymilvus, translating its errors into chatmem's."""
        if self._closed:
            raise StoreError("store is closed")
        with self._translating():
            return method(*args, timeout=self._timeout, **kwargs)

    @contextmanager
    def _translating(self) -> Iterator[None]:
        try:
            yield
        except self._pm.MilvusException as exc:
            raise self._translate(exc) from exc
        except self._rpc_error as exc:
            raise StoreUnavailableError(f"Milvus at {self.uri!r} is unreachable: {exc}") from exc

    def _translate(self, exc: Any) -> StoreError:
        errors = self._pm.exceptions
        unavailable = (
            errors.MilvusUnavailableException,
            errors.ConnectError,
            errors.ConnectionNotExistException,
        )
        # Status code 2 is pymilvus' CONNECT_FAILED.
        if isinstance(exc, unavailable) or exc.code == 2:
            return StoreUnavailableError(f"Milvus at {self.uri!r} is unavailable: {exc.message}")
        return StoreError(f"Milvus error: {exc.message}")

    # -- collections ---------------------------------------------------------------------

    def _prepare(self) -> EmbeddingInfo | None:
        self._ensure_collection(self._meta, self._meta_schema, self._dummy_index)
        self._ensure_collection(self._history, self._history_schema, self._dummy_index)
        version = self._read_meta("schema_version")
        if version is None:
            self._write_meta("schema_version", str(SCHEMA_VERSION))
        elif int(version) > SCHEMA_VERSION:
            raise StoreError(
                f"store schema version {version} is newer than this chatmem ({SCHEMA_VERSION});"
                " upgrade chatmem"
            )
        embedding = self._read_embedding()
        if self._has(self._memories):
            self._load(self._memories)
            self._expiry = "expires_at" in self._field_names()
            if embedding is not None:
                self._check_dimension(embedding)
        return embedding

    def _has_memories(self) -> bool:
        """Whether records can exist yet: the collection is made when a model is bound."""
        if not self._memories_exist:
            self._memories_exist = self._has(self._memories)
        return self._memories_exist

    def _has(self, collection: str) -> bool:
        return bool(self._call(self._client.has_collection, collection))

    def _load(self, collection: str) -> None:
        self._call(self._client.load_collection, collection)

    def _ensure_collection(
        self, name: str, schema: Callable[[], Any], index: Callable[[], Any]
    ) -> None:
        if not self._has(name):
            try:
                self._call(
                    self._client.create_collection,
                    name,
                    schema=schema(),
                    consistency_level="Strong",
                )
            except StoreError:
                if not self._has(name):  # Not created by another process meanwhile.
                    raise
            else:
                # pymilvus polls a synchronous index build every 0.5 s; the collection is
                # empty, so the build is immediate and loading waits for it anyway.
                self._call(self._client.create_index, name, index(), sync=False)
        self._load(name)

    def _new_schema(self) -> Any:
        return self._pm.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)

    def _meta_schema(self) -> Any:
        types = self._pm.DataType
        schema = self._new_schema()
        schema.add_field("key", types.VARCHAR, is_primary=True, max_length=64)
        schema.add_field("value", types.VARCHAR, max_length=MAX_VARCHAR_BYTES)
        schema.add_field("vec", types.FLOAT_VECTOR, dim=len(_DUMMY_VECTOR))
        return schema

    def _history_schema(self) -> Any:
        types = self._pm.DataType
        schema = self._new_schema()
        schema.add_field("id", types.VARCHAR, is_primary=True, max_length=64)
        schema.add_field(
            "user_key", types.VARCHAR, max_length=2 * ID_BYTES + 1, is_partition_key=True
        )
        for name in ("memory_id", "tenant_id", "user_id"):
            schema.add_field(name, types.VARCHAR, max_length=ID_BYTES)
        schema.add_field("seq", types.INT64)
        schema.add_field("version", types.INT64)
        schema.add_field("event", types.VARCHAR, max_length=16)
        for name in ("old", "new", "reason"):
            schema.add_field(name, types.VARCHAR, max_length=MAX_VARCHAR_BYTES)
        schema.add_field("at", types.INT64)
        schema.add_field("vec", types.FLOAT_VECTOR, dim=len(_DUMMY_VECTOR))
        return schema

    def _memories_schema(self, dimension: int) -> Any:
        types = self._pm.DataType
        schema = self._new_schema()
        schema.add_field("id", types.VARCHAR, is_primary=True, max_length=ID_BYTES)
        schema.add_field(
            "user_key", types.VARCHAR, max_length=2 * ID_BYTES + 1, is_partition_key=True
        )
        for name in ("tenant_id", "user_id", "agent_id", "project_id", "session_id"):
            schema.add_field(name, types.VARCHAR, max_length=ID_BYTES)
        schema.add_field("type", types.VARCHAR, max_length=32)
        schema.add_field("scope", types.VARCHAR, max_length=32)
        for name in ("created_at", "valid_from", "valid_to", "version", "expires_at"):
            schema.add_field(name, types.INT64)
        schema.add_field("user_metadata", types.JSON)
        schema.add_field(
            "meta_terms",
            types.ARRAY,
            element_type=types.VARCHAR,
            max_capacity=MAX_TERMS,
            max_length=TERM_BYTES,
        )
        schema.add_field("body", types.VARCHAR, max_length=MAX_VARCHAR_BYTES)
        schema.add_field(
            "text",
            types.VARCHAR,
            max_length=MAX_VARCHAR_BYTES,
            enable_analyzer=True,
            analyzer_params=ANALYZER,
        )
        schema.add_field("sparse", types.SPARSE_FLOAT_VECTOR)
        schema.add_field("embedding", types.FLOAT_VECTOR, dim=dimension)
        schema.add_function(
            self._pm.Function(
                name="text_bm25",
                function_type=self._pm.FunctionType.BM25,
                input_field_names=["text"],
                output_field_names=["sparse"],
            )
        )
        return schema

    def _dummy_index(self) -> Any:
        params = self._client.prepare_index_params()
        params.add_index(field_name="vec", index_type="FLAT", metric_type="L2")
        return params

    def _memories_index(self) -> Any:
        params = self._client.prepare_index_params()
        if self._lite_path is not None:
            params.add_index(field_name="embedding", index_type="FLAT", metric_type="COSINE")
        else:
            params.add_index(
                field_name="embedding",
                index_type="HNSW",
                metric_type="COSINE",
                params={"M": HNSW_M, "efConstruction": HNSW_EF_CONSTRUCTION},
            )
        params.add_index(
            field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25"
        )
        # Scalar indexes for what filters and bulk deletes test besides the partition key:
        # INVERTED is the one scalar index both Milvus Lite and a server build.
        for field in SCALAR_INDEXED:
            params.add_index(field_name=field, index_type="INVERTED")
        return params

    def _field_names(self) -> set[str]:
        described = self._call(self._client.describe_collection, self._memories)
        return {str(field["name"]) for field in described["fields"]}

    def _expression(self, scope: Filter) -> str:
        return filter_expression(scope, expiry=self._expiry)

    def _vector_dimension(self) -> int:
        described = self._call(self._client.describe_collection, self._memories)
        for field in described["fields"]:
            if field["name"] == "embedding":
                return int(field["params"]["dim"])
        raise StoreError(f"collection {self._memories!r} has no embedding field")

    # -- embedding binding -----------------------------------------------------------------

    def _read_meta(self, key: str) -> str | None:
        rows = self._call(
            self._client.query,
            self._meta,
            filter=f"key == {literal(key)}",
            output_fields=["value"],
            consistency_level="Strong",
        )
        return str(rows[0]["value"]) if rows else None

    def _write_meta(self, key: str, value: str) -> None:
        self._call(
            self._client.upsert, self._meta, [{"key": key, "value": value, "vec": _DUMMY_VECTOR}]
        )

    def _read_embedding(self) -> EmbeddingInfo | None:
        value = self._read_meta("embedding")
        return EmbeddingInfo.model_validate_json(value) if value else None

    def _check_dimension(self, info: EmbeddingInfo) -> None:
        dimension = self._vector_dimension()
        if dimension != info.dimension:
            raise EmbedderMismatchError(
                f"collection {self._memories!r} holds {dimension}-dimensional vectors;"
                f" the embedder {info.model} gives {info.dimension}"
            )

    @property
    def embedding(self) -> EmbeddingInfo | None:
        return self._embedding

    def bind_embedding(self, info: EmbeddingInfo) -> None:
        with self._lock:
            recorded = self._read_embedding()
            bound = recorded or info
            if bound == info:
                if self._has(self._memories):
                    self._check_dimension(info)
                else:
                    self._ensure_collection(
                        self._memories,
                        lambda: self._memories_schema(info.dimension),
                        self._memories_index,
                    )
                if recorded is None:
                    self._write_meta("embedding", info.model_dump_json())
        if bound != info:
            raise EmbedderMismatchError(
                f"store {self.uri!r} was built with {bound.model} ({bound.dimension} dimensions);"
                f" the embedder given is {info.model} ({info.dimension} dimensions)"
            )
        self._embedding = bound

    # -- rows ------------------------------------------------------------------------------

    def _memory_row(self, record: MemoryRecord, vector: Sequence[float]) -> dict[str, Any]:
        row = self._row_fields(record, vector)
        if self._expiry:
            expires_at = record.time.expires_at
            row["expires_at"] = ms_floor(expires_at) if expires_at else OPEN_END
        elif record.time.expires_at is not None:
            raise ValidationError(
                f"collection {self._memories!r} predates TTLs; export and import the"
                " memories into a new collection to set one",
                field="time.expires_at",
            )
        return row

    @staticmethod
    def _row_fields(record: MemoryRecord, vector: Sequence[float]) -> dict[str, Any]:
        document = record.model_dump_json()
        metadata = json.loads(document)["user_metadata"]  # as a reader will see it
        terms = metadata_terms(metadata) + access_terms(record)
        if len(terms) > MAX_TERMS:
            raise ValidationError(
                f"has more keys than the Milvus store can index ({MAX_TERMS // 2})",
                field="user_metadata",
            )
        time_info = record.time
        return {
            "id": record.id,
            "user_key": user_key(record.tenant_id, record.user_id),
            "tenant_id": record.tenant_id,
            "user_id": record.user_id,
            "agent_id": record.agent_id or "",
            "project_id": record.project_id or "",
            "session_id": record.session_id or "",
            "type": record.type.value,
            "scope": record.scope.value,
            "created_at": ms_floor(time_info.created_at),
            "valid_from": ms_floor(time_info.valid_from) if time_info.valid_from else OPEN_START,
            "valid_to": ms_floor(time_info.valid_to) if time_info.valid_to else OPEN_END,
            "version": record.metadata.version,
            "user_metadata": metadata,
            "meta_terms": terms,
            "body": _pack(document, "record"),
            "text": keyword_document(record),
            "embedding": [float(x) for x in vector],
        }

    def _history_row(
        self,
        event: HistoryEvent,
        old: MemoryRecord | None,
        new: MemoryRecord | None,
        reason: str | None,
        at: datetime,
    ) -> dict[str, Any]:
        subject = new or old
        assert subject is not None
        # Milvus has no NULL here: "" stands for "no record" and for "no reason"; a reason is
        # stored as a JSON string, so that an empty reason round-trips too.
        stored_reason = json.dumps(reason, ensure_ascii=False) if reason is not None else ""
        if _utf8_size(stored_reason) > MAX_VARCHAR_BYTES:
            raise ValidationError(f"is longer than {MAX_VARCHAR_BYTES} bytes", field="reason")
        return {
            "id": new_id(),
            "user_key": user_key(subject.tenant_id, subject.user_id),
            "memory_id": subject.id,
            "tenant_id": subject.tenant_id,
            "user_id": subject.user_id,
            "seq": self._next_seq(),
            "version": subject.metadata.version,
            "event": event.value,
            "old": _pack(old.model_dump_json(), "record") if old else "",
            "new": _pack(new.model_dump_json(), "record") if new else "",
            "reason": stored_reason,
            "at": ms_floor(at),
            "vec": _DUMMY_VECTOR,
        }

    def _next_seq(self) -> int:
        with self._lock:
            self._last_seq = max(self._last_seq + 1, time.time_ns())
            return self._last_seq

    # -- writes ----------------------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[None]:
        with self._lock:
            if self._closed:
                raise StoreError("store is closed")
            yield

    def put(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        self._check_batch(entries)
        ids = [entry.record.id for entry in entries]
        now = utcnow()
        with self._writing():
            rows = [self._memory_row(record, vector.tolist()) for record, vector in entries]
            history = [self._history_row(HistoryEvent.ADD, None, r, None, now) for r, _ in entries]
            taken = self._existing_ids(ids)
            if taken:
                raise ValidationError(f"memory {taken[0]!r} already exists", field="id")
            try:
                self._call(self._client.insert, self._memories, rows)
                self._call(self._client.insert, self._history, history)
            except StoreError as exc:
                self._undo(exc, lambda: self._delete_rows(self._memories, ids))
                self._undo(
                    exc, lambda: self._delete_rows(self._history, [h["id"] for h in history])
                )
                raise

    def _existing_ids(self, ids: Sequence[str]) -> list[str]:
        found: list[str] = []
        for chunk in _chunks(ids):
            rows = self._call(
                self._client.query,
                self._memories,
                filter=_in("id", chunk),
                output_fields=["id"],
                consistency_level="Strong",
            )
            found.extend(str(row["id"]) for row in rows)
        return found

    def _delete_rows(self, collection: str, ids: Sequence[str]) -> None:
        for chunk in _chunks(ids):
            self._call(self._client.delete, collection, ids=list(chunk))

    @staticmethod
    def _undo(failure: StoreError, action: Callable[[], object]) -> None:
        """Compensate a failed write; a failure to do so is noted on the original error."""
        try:
            action()
        except StoreError as undo_failure:
            failure.add_note(f"clean-up after the failure also failed: {undo_failure}")

    def update(self, changes: Sequence[Change]) -> None:
        if not changes:
            return
        for change in changes:
            if change.vector is not None:
                self._check_vector(change.vector)
        now = utcnow()
        with self._writing():
            originals = self._stored({change.record.id for change in changes})
            state = dict(originals)
            rows: dict[str, dict[str, Any]] = {}
            history = []
            for change in changes:
                new = change.record
                current = state.get(new.id)
                if current is None or (current.record.tenant_id, current.record.user_id) != (
                    new.tenant_id,
                    new.user_id,
                ):
                    raise NotFoundError(new.id)
                version = current.record.metadata.version
                if version != change.expected_version:
                    raise ConflictError(
                        f"memory {new.id!r} is at version {version}, not {change.expected_version}"
                    )
                vector = change.vector.tolist() if change.vector is not None else current.vector
                rows[new.id] = self._memory_row(new, vector)
                history.append(
                    self._history_row(HistoryEvent.UPDATE, current.record, new, change.reason, now)
                )
                state[new.id] = _Stored(new, vector)
            self._replace(rows, history, originals)

    def _replace(
        self,
        rows: dict[str, dict[str, Any]],
        history: list[dict[str, Any]],
        originals: dict[str, _Stored],
    ) -> None:
        try:
            self._call(self._client.upsert, self._memories, list(rows.values()))
            self._call(self._client.insert, self._history, history)
        except StoreError as exc:
            restore = [
                self._memory_row(s.record, s.vector) for i, s in originals.items() if i in rows
            ]
            self._undo(exc, lambda: self._call(self._client.upsert, self._memories, restore))
            self._undo(exc, lambda: self._delete_rows(self._history, [h["id"] for h in history]))
            raise

    def touch(self, uses: Sequence[Usage], scope: Filter) -> builtins.list[str]:
        user = scope.require_user()
        if not uses:
            return []
        with self._writing():
            if not self._has_memories():
                return []
            originals = {
                memory_id: stored
                for memory_id, stored in self._stored({use.id for use in uses}).items()
                if (stored.record.tenant_id, stored.record.user_id) == (scope.tenant_id, user)
            }
            changed = Usage.written([stored.record for stored in originals.values()], uses)
            if not changed:
                return []
            rows = [self._memory_row(r, originals[i].vector) for i, r in changed.items()]
            try:
                self._call(self._client.upsert, self._memories, rows)
            except StoreError as exc:
                restore = [self._memory_row(s.record, s.vector) for s in originals.values()]
                self._undo(exc, lambda: self._call(self._client.upsert, self._memories, restore))
                raise
        return builtins.list(changed)

    def _stored(self, ids: set[str]) -> dict[str, _Stored]:
        found: dict[str, _Stored] = {}
        for chunk in _chunks(sorted(ids)):
            rows = self._call(
                self._client.query,
                self._memories,
                filter=_in("id", chunk),
                output_fields=["id", "body", "embedding"],
                consistency_level="Strong",
            )
            for row in rows:
                vector = [float(x) for x in row["embedding"]]
                found[str(row["id"])] = _Stored(_record(row["body"]), vector)
        return found

    def delete(self, scope: Filter, reason: str | None = None) -> list[str]:
        with self._writing():
            if not self._has_memories():
                return []
            rows = self._scan(self._memories, self._expression(scope), _MEMORY_FIELDS)
            records = sorted(
                (r for r in (_record(row["body"]) for row in rows) if scope.matches(r)),
                key=_sort_key,
            )
            now = utcnow()
            for chunk in _chunks(records):
                self._delete_chunk(chunk, reason, now)
        return [record.id for record in records]

    def _delete_chunk(
        self, records: Sequence[MemoryRecord], reason: str | None, at: datetime
    ) -> None:
        history = [self._history_row(HistoryEvent.DELETE, r, None, reason, at) for r in records]
        self._call(self._client.insert, self._history, history)
        try:
            self._delete_rows(self._memories, [record.id for record in records])
        except StoreError as exc:
            self._undo(exc, lambda: self._delete_rows(self._history, [h["id"] for h in history]))
            raise

    # -- reads -----------------------------------------------------------------------------

    def _scan(self, collection: str, expression: str, fields: list[str]) -> list[dict[str, Any]]:
        """Every row matching ``expression``: one query, or an iterator past the query window."""
        rows = self._call(
            self._client.query,
            collection,
            filter=expression,
            output_fields=fields,
            limit=QUERY_WINDOW,
            consistency_level="Strong",
        )
        if len(rows) < QUERY_WINDOW:
            return list(rows)
        iterator = self._call(
            self._client.query_iterator,
            collection,
            batch_size=SCAN_BATCH,
            filter=expression,
            output_fields=fields,
            consistency_level="Strong",
        )
        everything: list[dict[str, Any]] = []
        try:
            with self._translating():
                while batch := iterator.next():
                    everything.extend(batch)
        finally:
            iterator.close()
        return everything

    def _records(self, expression: str, scope: Filter) -> dict[str, MemoryRecord]:
        rows = self._scan(self._memories, expression, _MEMORY_FIELDS)
        records = (_record(row["body"]) for row in rows)
        # Defence in depth (SPEC L7): the expression already selects exactly these.
        return {record.id: record for record in records if scope.matches(record)}

    def get(self, ids: Sequence[str], scope: Filter) -> list[MemoryRecord]:
        if not ids or not self._has_memories():
            return []
        found: dict[str, MemoryRecord] = {}
        for chunk in _chunks(sorted(set(ids))):
            narrowed = scope.model_copy(update={"ids": tuple(chunk)})
            found.update(self._records(self._expression(narrowed), narrowed))
        return [found[i] for i in ids if i in found]

    def vectors(self, ids: Sequence[str], scope: Filter) -> dict[str, Vector]:
        if not ids or not self._has_memories():
            return {}
        found: dict[str, Vector] = {}
        for chunk in _chunks(sorted(set(ids))):
            narrowed = scope.model_copy(update={"ids": tuple(chunk)})
            rows = self._scan(
                self._memories, self._expression(narrowed), ["id", "body", "embedding"]
            )
            for row in rows:
                if narrowed.matches(_record(row["body"])):
                    found[str(row["id"])] = np.asarray(row["embedding"], dtype=np.float32)
        return found

    def count(self, scope: Filter) -> int:
        if not self._has_memories():
            return 0
        rows = self._call(
            self._client.query,
            self._memories,
            filter=self._expression(scope),
            output_fields=["count(*)"],
            consistency_level="Strong",
        )
        return int(rows[0]["count(*)"])

    def users(
        self, tenant_id: str, *, after: str | None = None, limit: int = 1000
    ) -> builtins.list[str]:
        if limit < 1:
            raise ValidationError("must be at least 1", field="limit")
        if not self._has_memories():
            return []
        # Milvus has no DISTINCT: the user ids of the tenant's rows, and no other field.
        rows = self._scan(self._memories, f"tenant_id == {literal(tenant_id)}", ["user_id"])
        users = {str(row["user_id"]) for row in rows}
        return sorted(u for u in users if after is None or u > after)[:limit]

    def history(self, memory_id: str, scope: Filter) -> list[HistoryEntry]:
        conditions = [
            f"memory_id == {literal(memory_id)}",
            f"tenant_id == {literal(scope.tenant_id)}",
        ]
        if scope.user_id is not None:
            conditions.insert(0, f"user_key == {literal(user_key(scope.tenant_id, scope.user_id))}")
        rows = self._scan(self._history, " and ".join(conditions), _HISTORY_FIELDS)
        rows.sort(key=lambda row: (int(row["seq"]), str(row["id"])))
        return [
            HistoryEntry(
                memory_id=str(row["memory_id"]),
                version=int(row["version"]),
                event=HistoryEvent(row["event"]),
                old=_record(row["old"]) if row["old"] else None,
                new=_record(row["new"]) if row["new"] else None,
                reason=json.loads(row["reason"]) if row["reason"] else None,
                at=from_ms(int(row["at"])),
            )
            for row in rows
        ]

    # -- search ----------------------------------------------------------------------------

    def search(self, query: SearchQuery) -> builtins.list[Candidate]:
        query = query.with_vector()
        query.filter.require_user()
        vector = query.vector if self._embedding is not None else None
        if vector is not None:
            self._check_vector(vector)
        if query.candidates < 1 or not self._has_memories():
            return []
        expression = self._expression(query.filter)
        limit = min(query.candidates, QUERY_WINDOW)
        cosine: dict[str, float] = {}
        keyword: dict[str, float] = {}
        if vector is not None:
            params: dict[str, Any] = {"metric_type": "COSINE"}
            if self._lite_path is None:
                params["params"] = {"ef": max(limit, HNSW_MIN_EF)}
            cosine = self._search(
                expression, [float(x) for x in vector], "embedding", params, limit
            )
        terms = keyword_query(query.text) if query.text else ""
        if terms:
            keyword = self._search(expression, terms, "sparse", {"metric_type": "BM25"}, limit)
        missing = sorted(set(keyword) - set(cosine))
        if vector is not None and missing:
            for memory_id, stored in self.vectors(missing, query.filter).items():
                cosine[memory_id] = float(stored @ vector)
        return [
            Candidate(memory_id, cosine.get(memory_id), keyword.get(memory_id))
            for memory_id in sorted(set(cosine) | set(keyword))
        ]

    def _search(
        self, expression: str, data: Any, field: str, params: dict[str, Any], limit: int
    ) -> dict[str, float]:
        results = self._call(
            self._client.search,
            self._memories,
            data=[data],
            filter=expression,
            limit=limit,
            output_fields=["id"],
            search_params=params,
            anns_field=field,
            consistency_level="Strong",
        )
        # COSINE: the similarity. BM25: a server gives the score, Lite its negation.
        return {
            str(hit["id"]): abs(float(hit["distance"]))
            if field == "sparse"
            else float(hit["distance"])
            for hit in results[0]
        }

    # Defined last: inside the class body, ``list`` names this method from here on.
    def list(self, scope: Filter, limit: int = 100, cursor: str | None = None) -> Page:
        if limit < 1:
            raise ValidationError("must be at least 1", field="limit")
        expression = self._expression(scope)
        if cursor is not None:
            created, last_id = _decode_cursor(cursor)
            expression += (
                f" and (created_at > {created} or"
                f" (created_at == {created} and id > {literal(last_id)}))"
            )
        if not self._has_memories():
            return Page([], None)
        keys = sorted(
            (int(row["created_at"]), str(row["id"]))
            for row in self._scan(self._memories, expression, ["id", "created_at"])
        )
        page = keys[:limit]
        found: dict[str, MemoryRecord] = {}
        for chunk in _chunks([memory_id for _, memory_id in page]):
            narrowed = scope.model_copy(update={"ids": tuple(chunk)})
            found.update(self._records(self._expression(narrowed), narrowed))
        records = [found[memory_id] for _, memory_id in page if memory_id in found]
        next_cursor = _encode_cursor(*page[-1]) if len(keys) > limit else None
        return Page(records, next_cursor)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._client.close()
        if self._lite_path is not None:
            _LITE_SERVERS.release(self._lite_path)

    def __repr__(self) -> str:
        return f"MilvusStore({self.uri!r})"
