"""The Milvus store's collections: their schemas and indexes, making them, and the meta pairs.

- ``<prefix>_memories``: one row per record, made when an embedding model is bound.
  ``user_key`` (tenant + ``\\x1f`` + user) is the partition key, so a user's search reads only
  that user's partition and tenants never share a key. The filterable fields are scalar
  columns (open ends of the validity interval are sentinels); ``body`` is the full record JSON;
  ``embedding`` is a COSINE FLOAT_VECTOR (FLAT on Lite, which is exact and enough for one
  machine; HNSW with M=16, efConstruction=200 on a server); ``text`` feeds a BM25 function whose
  SPARSE_FLOAT_VECTOR output answers the keyword half of a search. ``tenant_id``,
  ``session_id``, ``type``, ``created_at``, ``valid_from`` and ``valid_to`` carry INVERTED
  scalar indexes (collections created before they were added keep working without them).
  On a server older than 2.5 (``features``) the collection is dense-only, without ``text``
  and ``sparse``, and before 2.4 the scalar indexes are Trie (VARCHAR) and STL_SORT (INT64).
  ``expires_at`` (the TTL, ``OPEN_END`` for none) is a column of collections made since TTLs
  exist; Milvus Lite cannot add a column to a collection, so an older collection refuses a
  memory with an ``expires_at`` (export and import into a new one to get it).
- ``<prefix>_history``: one row per add, update and delete, with the record before and after.
- ``<prefix>_meta``: the schema version and the bound embedding model and dimension.

Milvus requires a vector field in every collection, so history and meta carry a 2-dimensional
dummy vector. Every read uses Strong consistency, so a write is visible to the next read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chatmem.errors import StoreError
from chatmem.stores.milvus.connection import MilvusConnection
from chatmem.stores.milvus.expressions import literal
from chatmem.stores.milvus.features import FULL, ServerFeatures
from chatmem.stores.vectordb.fields import TERM_BYTES

SCHEMA_VERSION = 1
#: Milvus' largest VARCHAR, in bytes.
MAX_VARCHAR_BYTES = 65_535
#: A 256-character identifier takes at most this many UTF-8 bytes.
ID_BYTES = 1_024
#: Most metadata terms in one record.
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
#: The memories' INT64 fields; the other indexed fields are VARCHAR.
INT_FIELDS = ("created_at", "valid_from", "valid_to", "version", "expires_at")
#: Before INVERTED (Milvus 2.4), each field type's own scalar index.
_LEGACY_SCALAR_INDEX = {False: "Trie", True: "STL_SORT"}
#: Milvus' analyzer for the keyword text. The text is analysed here first (see ``rows``), so
#: Milvus only splits it, and Lite (which has no stemmer) and a server index the same terms.
ANALYZER: dict[str, Any] = {"tokenizer": "standard", "filter": ["lowercase"]}
DUMMY_VECTOR = [0.0, 0.0]


def _new_schema(pm: Any) -> Any:
    return pm.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)


def meta_schema(pm: Any) -> Any:
    """The meta collection: key, value."""
    types = pm.DataType
    schema = _new_schema(pm)
    schema.add_field("key", types.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("value", types.VARCHAR, max_length=MAX_VARCHAR_BYTES)
    schema.add_field("vec", types.FLOAT_VECTOR, dim=len(DUMMY_VECTOR))
    return schema


def _add_owner(schema: Any, types: Any, id_bytes: int) -> None:
    schema.add_field("id", types.VARCHAR, is_primary=True, max_length=id_bytes)
    schema.add_field("user_key", types.VARCHAR, max_length=2 * ID_BYTES + 1, is_partition_key=True)


def history_schema(pm: Any) -> Any:
    """The history collection: one row per change of a memory."""
    types = pm.DataType
    schema = _new_schema(pm)
    _add_owner(schema, types, 64)
    for name in ("memory_id", "tenant_id", "user_id"):
        schema.add_field(name, types.VARCHAR, max_length=ID_BYTES)
    schema.add_field("seq", types.INT64)
    schema.add_field("version", types.INT64)
    schema.add_field("event", types.VARCHAR, max_length=16)
    for name in ("old", "new", "reason"):
        schema.add_field(name, types.VARCHAR, max_length=MAX_VARCHAR_BYTES)
    schema.add_field("at", types.INT64)
    schema.add_field("vec", types.FLOAT_VECTOR, dim=len(DUMMY_VECTOR))
    return schema


def memories_schema(pm: Any, dimension: int, keywords: bool = True) -> Any:
    """The memories collection, for ``dimension``-sized embeddings; ``keywords``: with the
    BM25 text and its sparse vector (Milvus Lite, 2.5+ servers)."""
    types = pm.DataType
    schema = _new_schema(pm)
    _add_owner(schema, types, ID_BYTES)
    for name in ("tenant_id", "user_id", "agent_id", "project_id", "session_id"):
        schema.add_field(name, types.VARCHAR, max_length=ID_BYTES)
    schema.add_field("type", types.VARCHAR, max_length=32)
    schema.add_field("scope", types.VARCHAR, max_length=32)
    for name in INT_FIELDS:
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
    if keywords:
        _add_keywords(pm, schema)
    schema.add_field("embedding", types.FLOAT_VECTOR, dim=dimension)
    return schema


def _add_keywords(pm: Any, schema: Any) -> None:
    types = pm.DataType
    schema.add_field(
        "text",
        types.VARCHAR,
        max_length=MAX_VARCHAR_BYTES,
        enable_analyzer=True,
        analyzer_params=ANALYZER,
    )
    schema.add_field("sparse", types.SPARSE_FLOAT_VECTOR)
    bm25 = pm.Function(
        name="text_bm25",
        function_type=pm.FunctionType.BM25,
        input_field_names=["text"],
        output_field_names=["sparse"],
    )
    schema.add_function(bm25)


def dummy_index(client: Any) -> Any:
    """The index of the dummy vector of history and meta."""
    params = client.prepare_index_params()
    params.add_index(field_name="vec", index_type="FLAT", metric_type="L2")
    return params


def memories_index(client: Any, lite: bool, features: ServerFeatures = FULL) -> Any:
    """The memories' indexes: the embedding (FLAT on Lite, HNSW on a server), the BM25
    vector (where the server has BM25), and the scalar fields filters and bulk deletes test."""
    params = client.prepare_index_params()
    if lite:
        params.add_index(field_name="embedding", index_type="FLAT", metric_type="COSINE")
    else:
        params.add_index(
            field_name="embedding",
            index_type="HNSW",
            metric_type="COSINE",
            params={"M": HNSW_M, "efConstruction": HNSW_EF_CONSTRUCTION},
        )
    if features.bm25:
        params.add_index(
            field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25"
        )
    # Besides the partition key: INVERTED is the one scalar index Lite and a server both build.
    for field in SCALAR_INDEXED:
        kind = "INVERTED"
        if not features.inverted_index:
            kind = _LEGACY_SCALAR_INDEX[field in INT_FIELDS]
        params.add_index(field_name=field, index_type=kind)
    return params


class MilvusCollections:
    """The three collections of one store on one connection, made and loaded on demand."""

    def __init__(
        self, conn: MilvusConnection, prefix: str, features: ServerFeatures = FULL
    ) -> None:
        self.conn = conn
        self.features = features
        self.memories = f"{prefix}_memories"
        self.history = f"{prefix}_history"
        self.meta = f"{prefix}_meta"
        #: Whether the memories collection has the ``expires_at`` column (see the docstring).
        self.expiry = True
        #: Whether it has the keyword fields (``text``, ``sparse``): made where BM25 is.
        self.keywords = features.bm25

    def make_meta_and_history(self) -> None:
        """Make (or load) the meta and history collections."""
        self.ensure(self.meta, lambda: meta_schema(self.conn.pm), self._dummy_index)
        self.ensure(self.history, lambda: history_schema(self.conn.pm), self._dummy_index)

    def load_memories(self) -> bool:
        """Load the memories collection and learn its columns; False when it is not made."""
        if not self.has(self.memories):
            return False
        self.conn.call(self.conn.client.load_collection, self.memories)
        names = self._field_names()
        self.expiry = "expires_at" in names
        self.keywords = "sparse" in names
        return True

    def has(self, collection: str) -> bool:
        return bool(self.conn.call(self.conn.client.has_collection, collection))

    def ensure(self, name: str, schema: Callable[[], Any], index: Callable[[], Any]) -> None:
        """Make collection ``name`` unless it exists (or another process makes it), and load
        it."""
        conn = self.conn
        if not self.has(name):
            try:
                conn.call(
                    conn.client.create_collection,
                    name,
                    schema=schema(),
                    consistency_level="Strong",
                )
            except StoreError:
                if not self.has(name):  # Not created by another process meanwhile.
                    raise
            else:
                # pymilvus polls a synchronous index build every 0.5 s; the collection is
                # empty, so the build is immediate and loading waits for it anyway.
                conn.call(conn.client.create_index, name, index(), sync=False)
        conn.call(conn.client.load_collection, name)

    def make_memories(self, dimension: int) -> None:
        """Make the memories collection for ``dimension``-sized embeddings."""
        lite = self.conn.lite_path is not None
        self.ensure(
            self.memories,
            lambda: memories_schema(self.conn.pm, dimension, self.features.bm25),
            lambda: memories_index(self.conn.client, lite, self.features),
        )
        self.keywords = self.features.bm25

    def _dummy_index(self) -> Any:
        return dummy_index(self.conn.client)

    def _describe_fields(self) -> list[dict[str, Any]]:
        described = self.conn.call(self.conn.client.describe_collection, self.memories)
        fields: list[dict[str, Any]] = described["fields"]
        return fields

    def _field_names(self) -> set[str]:
        return {str(field["name"]) for field in self._describe_fields()}

    def vector_dimension(self) -> int:
        """The dimension of the stored embeddings."""
        for field in self._describe_fields():
            if field["name"] == "embedding":
                return int(field["params"]["dim"])
        raise StoreError(f"collection {self.memories!r} has no embedding field")

    def read_meta(self, key: str) -> str | None:
        """The value of a meta pair, None when it is not set."""
        rows = self.conn.query(self.meta, f"key == {literal(key)}", ["value"])
        return str(rows[0]["value"]) if rows else None

    def write_meta(self, key: str, value: str) -> None:
        """Set a meta pair."""
        row = {"key": key, "value": value, "vec": DUMMY_VECTOR}
        self.conn.call(self.conn.client.upsert, self.meta, [row])
