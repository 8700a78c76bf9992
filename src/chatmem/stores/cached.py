"""A Redis hot cache in front of any store (SPEC B3).

``CachedStore`` is itself a ``MemoryStore``. It answers ``get`` (when the scope names a user)
and ``search`` from Redis when it can, and delegates everything else, and every miss, to the
store it wraps. Entries expire after ``ttl_s``.

Correctness rests on tokens, not on deleting keys in time. Three random tokens (one for the
whole cache, one per tenant, one per user) are read *before* the inner store is, and every
entry is saved with the tokens it was read under. An entry is served only while all three
are unchanged. Every write (put, update, touch, delete) replaces the tokens of the users it
touched (a delete without a user replaces the tenant's) after the inner write, so nothing read
before a write is served after it: a forgotten memory is never served from the cache. A token
that Redis loses (eviction, restart) is replaced by a fresh one, which also retires old entries.

Redis down: reads go to the inner store and a warning is logged; Redis is left alone for
``RETRY_AFTER_S`` before the next try. Invalidations that could not be sent are kept and sent
first when Redis is back; until they are, this process reads around the cache. Another
process sharing the Redis could still serve an entry made stale while Redis was unreachable
from here, for at most ``ttl_s``.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import numpy as np
import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from chatmem import checks
from chatmem.errors import ConfigError
from chatmem.records import (
    Candidate,
    EmbeddingInfo,
    Entry,
    Filter,
    HistoryEntry,
    MemoryRecord,
    Page,
    Vector,
)
from chatmem.stores.base import Change, MemoryStore, SearchQuery, Usage

log = logging.getLogger(__name__)

T = TypeVar("T")
Owner = tuple[str, str]

#: After a Redis error, how long the cache is left alone before the next try (seconds).
RETRY_AFTER_S = 5.0
#: Socket timeouts (seconds): a slow cache should cost little more than a miss.
SOCKET_TIMEOUT_S = 0.5
#: Past this many users and keys waiting for invalidation, the whole cache is retired instead.
MAX_PENDING = 10_000


@dataclass
class _Pending:
    """Invalidations Redis has not acknowledged yet."""

    owners: set[Owner] = field(default_factory=set)
    tenants: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    everything: bool = False

    def __bool__(self) -> bool:
        return bool(self.owners or self.tenants or self.keys or self.everything)


class CachedStore(MemoryStore):
    """``inner`` with a read-through Redis cache for ``get`` and ``search``.

    ``redis_url`` is a redis-py URL (``redis://host:6379/0``, ``rediss://…``, ``unix://…``);
    keys start with ``prefix``. After a Redis error the cache is left alone for
    ``retry_after_s``. Closing this store closes ``inner``.
    """

    def __init__(
        self,
        inner: MemoryStore,
        redis_url: str,
        ttl_s: int = 300,
        prefix: str = "chatmem:cache",
        *,
        retry_after_s: float = RETRY_AFTER_S,
    ) -> None:
        ttl_s = checks.whole(ttl_s, "ttl_s", low=1, message="must be at least 1 second")
        retry_after_s = checks.number(retry_after_s, "retry_after_s", low=0)
        self.inner = inner
        self.capabilities = inner.capabilities
        self.ttl_s = ttl_s
        self.prefix = prefix
        # Tokens outlive the entries made under them, so entries are retired by a write,
        # not by a token expiring; a lost token only costs misses.
        self._token_ttl_s = ttl_s * 4
        try:
            self._redis = redis.Redis.from_url(
                redis_url,
                socket_timeout=SOCKET_TIMEOUT_S,
                socket_connect_timeout=SOCKET_TIMEOUT_S,
                # No retries: a miss is cheaper than waiting for a struggling cache.
                retry=Retry(NoBackoff(), 0),
            )
        except ValueError as exc:
            raise ConfigError(f"not a Redis URL: {redis_url!r} ({exc})") from exc
        self._lock = threading.Lock()
        self._pending = _Pending()
        self._retry_after_s = retry_after_s
        self._down_until = 0.0

    # -- keys ------------------------------------------------------------------------------

    def _key(self, *parts: str) -> str:
        # Quoting makes the parts unambiguous: a ':' inside an id cannot shift them.
        return ":".join([self.prefix, *(quote(part, safe="") for part in parts)])

    def _token_keys(self, owner: Owner) -> builtins.list[str]:
        tenant, user = owner
        return [self._key("token"), self._key("token", tenant), self._key("token", tenant, user)]

    def _record_key(self, owner: Owner, memory_id: str) -> str:
        return self._key("record", *owner, memory_id)

    def _search_key(self, owner: Owner, query: SearchQuery) -> str:
        scope = query.filter.model_dump(mode="json", exclude_none=True)
        for name in ("ids", "types", "scopes", "reader_roles"):
            if name in scope:
                scope[name] = sorted(scope[name])
        digest = hashlib.blake2b(digest_size=20)
        digest.update(json.dumps([scope, query.text, query.candidates], sort_keys=True).encode())
        if query.vector is not None:
            digest.update(f"|{query.vector.dtype.str}{query.vector.shape}|".encode())
            digest.update(np.ascontiguousarray(query.vector).tobytes())
        return self._key("search", *owner, digest.hexdigest())

    # -- the cache boundary ----------------------------------------------------------------

    def _cache(self, action: Callable[[], T]) -> T | None:
        """Run a Redis action; on a Redis error, log it, back off and return None."""
        try:
            return action()
        except RedisError as exc:  # boundary: the cache is optional, the inner store is not
            self._down_until = time.monotonic() + self._retry_after_s
            log.warning(
                "Redis cache unavailable (%s); reading around it for %g s",
                exc,
                self._retry_after_s,
            )
            return None

    def _usable(self) -> bool:
        """Whether reads may use the cache: Redis is not backing off and has every
        invalidation this process owes it."""
        if time.monotonic() < self._down_until:
            return False
        # Held while sending, so no reader trusts the cache before the invalidations land.
        with self._lock:
            if not self._pending:
                return True
            if self._cache(lambda: self._send(self._pending)) is None:
                return False
            self._pending = _Pending()
            return True

    def _send(self, pending: _Pending) -> bool:
        """Replace the tokens and delete the keys ``pending`` names; True when done."""
        pipe = self._redis.pipeline(transaction=False)
        token_keys = [self._key("token", tenant) for tenant in pending.tenants]
        token_keys += [self._token_keys(owner)[2] for owner in pending.owners]
        if pending.everything:
            token_keys.append(self._key("token"))
        for key in token_keys:
            pipe.set(key, secrets.token_hex(8), ex=self._token_ttl_s)
        if pending.keys:
            pipe.delete(*pending.keys)
        pipe.execute()
        return True

    def _invalidate(
        self,
        owners: Iterable[Owner] = (),
        tenants: Iterable[str] = (),
        keys: Iterable[str] = (),
        everything: bool = False,
    ) -> None:
        with self._lock:
            pending = self._pending
            pending.owners.update(owners)
            pending.tenants.update(tenants)
            pending.keys.update(keys)
            pending.everything |= everything
            if len(pending.owners) + len(pending.keys) > MAX_PENDING:
                self._pending = _Pending(everything=True)
        self._usable()  # sends them now unless Redis is backing off

    def _read(self, owner: Owner, keys: builtins.list[str]) -> tuple[bytes, builtins.list[Any]]:
        """``owner``'s tokens (made when missing) joined into one, and the entries at keys."""
        token_keys = self._token_keys(owner)
        pipe = self._redis.pipeline(transaction=False)
        for key in token_keys:
            pipe.getex(key, ex=self._token_ttl_s)
        pipe.mget(keys)
        *tokens, entries = pipe.execute()
        if any(token is None for token in tokens):
            tokens = self._make_tokens(token_keys)
        return b":".join(tokens), entries

    def _make_tokens(self, token_keys: builtins.list[str]) -> builtins.list[bytes]:
        pipe = self._redis.pipeline(transaction=False)
        for key in token_keys:
            pipe.set(key, secrets.token_hex(8), nx=True, ex=self._token_ttl_s)
        pipe.mget(token_keys)
        # A token that expired again in between becomes one nobody else holds: what is
        # saved under it is never served.
        return [token or secrets.token_hex(8).encode() for token in pipe.execute()[-1]]

    def _save(self, token: bytes, items: dict[str, str]) -> None:
        def write() -> None:
            pipe = self._redis.pipeline(transaction=False)
            for key, value in items.items():
                pipe.set(key, token + b"\n" + value.encode(), ex=self.ttl_s)
            pipe.execute()

        if items:
            self._cache(write)

    @staticmethod
    def _valid(entry: bytes | None, token: bytes) -> bytes | None:
        """The payload of an entry made under ``token``; None for a missing or stale one."""
        if entry is None:
            return None
        made_under, _, payload = entry.partition(b"\n")
        return payload if made_under == token else None

    # -- cached reads ------------------------------------------------------------------------

    def get(self, ids: Sequence[str], scope: Filter) -> builtins.list[MemoryRecord]:
        if scope.user_id is None or not ids or not self._usable():
            return self.inner.get(ids, scope)
        owner = (scope.tenant_id, scope.user_id)
        wanted = list(dict.fromkeys(ids))
        keys = {memory_id: self._record_key(owner, memory_id) for memory_id in wanted}
        read = self._cache(lambda: self._read(owner, list(keys.values())))
        if read is None:
            return self.inner.get(ids, scope)
        token, entries = read
        found: dict[str, MemoryRecord] = {}
        missing = []
        for memory_id, entry in zip(wanted, entries, strict=True):
            record = _parse_record(self._valid(entry, token), memory_id, owner)
            if record is None:
                missing.append(memory_id)
            elif scope.matches(record):  # the current version, so the filter is decided
                found[memory_id] = record
        if missing:
            fetched = self.inner.get(missing, scope)
            found.update((r.id, r) for r in fetched)
            self._save(token, {keys[r.id]: r.model_dump_json() for r in fetched})
        return [found[i] for i in ids if i in found]

    def search(self, query: SearchQuery) -> builtins.list[Candidate]:
        query = query.with_vector()  # the vector is part of the cache key
        owner = (query.filter.tenant_id, query.filter.require_user())
        if not self._usable():
            return self.inner.search(query)
        key = self._search_key(owner, query)
        read = self._cache(lambda: self._read(owner, [key]))
        if read is None:
            return self.inner.search(query)
        token, (entry,) = read
        cached = _parse_candidates(self._valid(entry, token))
        if cached is not None:
            return cached
        found = self.inner.search(query)
        self._save(token, {key: json.dumps([list(c) for c in found])})
        return found

    # -- writes: the inner store's, then invalidation, even when the write failed ------------

    def put(self, entries: Sequence[Entry]) -> None:
        try:
            self.inner.put(entries)
        finally:
            self._invalidate_records([entry.record for entry in entries])

    def put_with(
        self,
        entries: Sequence[Entry],
        *,
        states: Mapping[str, bytes] | None = None,
        then: Sequence[Change] = (),
    ) -> bool:
        try:
            return self.inner.put_with(entries, states=states, then=then)
        finally:
            self._invalidate_records([e.record for e in entries] + [c.record for c in then])

    def update(self, changes: Sequence[Change]) -> None:
        try:
            self.inner.update(changes)
        finally:
            self._invalidate_records([change.record for change in changes])

    def touch(self, uses: Sequence[Usage], scope: Filter) -> builtins.list[str]:
        owner = (scope.tenant_id, scope.require_user())
        if not uses:
            return []
        try:
            return self.inner.touch(uses, scope)
        finally:
            keys = [self._record_key(owner, use.id) for use in uses]
            self._invalidate(owners=[owner], keys=keys)

    def delete(self, scope: Filter, reason: str | None = None) -> builtins.list[str]:
        removed: builtins.list[str] = []
        try:
            removed = self.inner.delete(scope, reason)
            return removed
        finally:
            if scope.user_id is None:
                self._invalidate(tenants=[scope.tenant_id])
            else:
                owner = (scope.tenant_id, scope.user_id)
                keys = [self._record_key(owner, memory_id) for memory_id in removed]
                self._invalidate(owners=[owner], keys=keys)

    def _invalidate_records(self, records: Sequence[MemoryRecord]) -> None:
        owners = [(r.tenant_id, r.user_id) for r in records]
        keys = [self._record_key(owner, r.id) for owner, r in zip(owners, records, strict=True)]
        self._invalidate(owners=owners, keys=keys)

    def clear(self) -> None:
        """Retire every entry of this cache (all tenants and users)."""
        self._invalidate(everything=True)

    # -- delegated ---------------------------------------------------------------------------

    def bind_embedding(self, info: EmbeddingInfo) -> None:
        self.inner.bind_embedding(info)

    @property
    def embedding(self) -> EmbeddingInfo | None:
        return self.inner.embedding

    def vectors(self, ids: Sequence[str], scope: Filter) -> dict[str, Vector]:
        return self.inner.vectors(ids, scope)

    def word_states(self, ids: Sequence[str], scope: Filter) -> dict[str, bytes]:
        return self.inner.word_states(ids, scope)

    def put_word_states(self, states: Mapping[str, bytes], scope: Filter) -> None:
        self.inner.put_word_states(states, scope)

    def list(self, scope: Filter, limit: int = 100, cursor: str | None = None) -> Page:
        return self.inner.list(scope, limit, cursor)

    def count(self, scope: Filter) -> int:
        return self.inner.count(scope)

    def users(
        self, tenant_id: str, *, after: str | None = None, limit: int = 1000
    ) -> builtins.list[str]:
        return self.inner.users(tenant_id, after=after, limit=limit)

    def history(self, memory_id: str, scope: Filter) -> builtins.list[HistoryEntry]:
        return self.inner.history(memory_id, scope)

    def close(self) -> None:
        try:
            self._redis.close()
        finally:
            self.inner.close()

    def __repr__(self) -> str:
        return f"CachedStore({self.inner!r}, prefix={self.prefix!r})"


def _parse_record(payload: bytes | None, memory_id: str, owner: Owner) -> MemoryRecord | None:
    """A cached record, or None when there is none or it is not what the key promises."""
    if payload is None:
        return None
    try:
        record = MemoryRecord.model_validate_json(payload)
    except ValueError:  # a foreign or damaged value is a miss
        return None
    if (record.id, record.tenant_id, record.user_id) != (memory_id, *owner):
        return None
    return record


def _parse_candidates(payload: bytes | None) -> builtins.list[Candidate] | None:
    if payload is None:
        return None
    try:
        return [Candidate(str(i), v, k) for i, v, k in json.loads(payload)]
    except (ValueError, TypeError):  # a foreign or damaged value is a miss
        return None
