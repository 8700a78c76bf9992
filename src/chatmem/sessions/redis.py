"""Sessions in Redis: shared by every process that reaches the server (SPEC S3, B3).

Keys, under ``prefix``, with every tenant, user and session id percent-encoded, so an id
holding ``:`` (or ``*``, ``%``) can never reach into another session's keys:

- ``{prefix}:s:{tenant}:{user}:{session}:log``: a list, the messages as JSON, oldest first.
- ``{prefix}:s:{tenant}:{user}:{session}:meta``: a hash: ``state`` (the state's JSON without
  revision and ended_at), ``revision``, ``ended_at`` (absent while open), ``last_turn``,
  ``updated_at``. It exists for every session that was ever written.
- ``{prefix}:u:{tenant}:{user}``: a sorted set of the user's session ids by ``updated_at``.
- ``{prefix}:idle``: a sorted set of open sessions with messages, ``tenant:user:session``,
  by ``updated_at``.
- ``{prefix}:text:{tenant}``: a hash of the tenant's named texts (never expires).

Append, save_state and the deletes are Lua scripts: the turn-order check, the revision
compare and the index updates run in the same atomic step as the write, whatever number of
processes append at once. With ``ttl_s`` every write refreshes the expiry of the session's
keys and of both indexes together; readers skip index entries whose session has expired.
The scripts build keys from the prefix for deletes of a whole user, so this backend targets
a single Redis server (or a primary with replicas), not Redis Cluster.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import cast
from urllib.parse import quote, unquote

import redis

from chatmem import checks
from chatmem.errors import ConflictError, StoreError, StoreUnavailableError, ValidationError
from chatmem.messages import Message, SessionKey, check_turn_order, last_turn_id, now_ms
from chatmem.sessions.base import SessionInfo, SessionState, SessionStore
from chatmem.stores.gate import Gate

DEFAULT_URL = "redis://127.0.0.1:6379/0"
#: Seconds to wait for a TCP connection before calling the server unreachable.
CONNECT_TIMEOUT_S = 5.0

# Turn ids travel as decimal strings and are compared by length, then bytes: exact for
# integers of any size, where Lua's doubles would round past 2**53.
_APPEND = """
local function before(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local stored = redis.call('HGET', KEYS[2], 'last_turn')
if stored and ARGV[5] ~= '' and before(ARGV[5], stored) then
  return {0, stored}
end
local length = redis.call('LLEN', KEYS[1])
for i = 7, #ARGV, 1000 do
  length = redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if ARGV[6] ~= '' then redis.call('HSET', KEYS[2], 'last_turn', ARGV[6]) end
redis.call('HSET', KEYS[2], 'updated_at', ARGV[1])
if redis.call('HDEL', KEYS[2], 'ended_at') == 1 then
  redis.call('HINCRBY', KEYS[2], 'revision', 1)
end
redis.call('ZADD', KEYS[3], ARGV[1], ARGV[3])
if length > 0 then redis.call('ZADD', KEYS[4], ARGV[1], ARGV[4]) end
if tonumber(ARGV[2]) > 0 then
  for _, key in ipairs(KEYS) do redis.call('EXPIRE', key, ARGV[2]) end
end
return {1, length}
"""

_SAVE_STATE = """
local revision = tonumber(redis.call('HGET', KEYS[2], 'revision') or '0')
if revision ~= tonumber(ARGV[1]) then return {0, revision} end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[2], 'updated_at', ARGV[4])
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[6])
end
redis.call('HSET', KEYS[2], 'state', ARGV[2])
redis.call('HINCRBY', KEYS[2], 'revision', 1)
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[2], 'ended_at')
  if redis.call('LLEN', KEYS[1]) > 0 then
    redis.call('ZADD', KEYS[4], redis.call('HGET', KEYS[2], 'updated_at'), ARGV[7])
  end
else
  redis.call('HSET', KEYS[2], 'ended_at', ARGV[3])
  redis.call('ZREM', KEYS[4], ARGV[7])
end
if tonumber(ARGV[5]) > 0 then
  for _, key in ipairs(KEYS) do redis.call('EXPIRE', key, ARGV[5]) end
end
return {1, revision + 1}
"""

_DELETE = """
local existed = redis.call('EXISTS', KEYS[2])
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[2])
return existed
"""

# KEYS: the user's index, the idle index. ARGV: the user's session key prefix and idle
# member prefix. Index members are encoded session ids, so they splice into keys safely.
_DELETE_USER = """
local count = 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local base = ARGV[1] .. id
  count = count + redis.call('EXISTS', base .. ':meta')
  redis.call('DEL', base .. ':log', base .. ':meta')
  redis.call('ZREM', KEYS[2], ARGV[2] .. id)
end
redis.call('DEL', KEYS[1])
return count
"""


def _part(value: str) -> str:
    """An id as a key part: no ':' (nor any other byte that could mean structure) survives."""
    return quote(value, safe="")


@contextmanager
def _translated() -> Iterator[None]:
    """Redis's exceptions as chatmem's, with the original as ``__cause__``."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise StoreUnavailableError(f"Redis is unreachable: {exc}") from exc
    except redis.RedisError as exc:
        raise StoreError(f"Redis error: {exc}") from exc


def _redis_range(start: int, stop: int | None) -> tuple[int, int] | None:
    """A Python slice as LRANGE's inclusive bounds (Redis clamps both ends as Python does),
    or None when it is empty whatever the length."""
    if stop is None:
        return start, -1
    if stop == 0:
        return None
    return start, stop - 1


class RedisSessionStore(SessionStore):
    """Sessions in Redis; ``ttl_s`` (seconds) makes idle sessions expire on their own."""

    def __init__(
        self, url: str = DEFAULT_URL, *, prefix: str = "chatmem", ttl_s: int | None = None
    ) -> None:
        if not prefix:
            raise ValidationError("must not be empty", field="prefix")
        if ttl_s is not None:
            ttl_s = checks.whole(ttl_s, "ttl_s", low=1, message="must be at least 1 second")
        self.url = url
        self.prefix = prefix
        self.ttl_s = ttl_s
        try:
            self._client = redis.Redis.from_url(
                url, decode_responses=True, socket_connect_timeout=CONNECT_TIMEOUT_S
            )
        except ValueError as exc:
            raise ValidationError(f"not a Redis URL: {exc}", field="url") from exc
        try:
            with _translated():
                self._client.ping()
        except StoreError:
            self._client.close()
            raise
        self._append = self._client.register_script(_APPEND)
        self._save_state = self._client.register_script(_SAVE_STATE)
        self._delete = self._client.register_script(_DELETE)
        self._delete_user = self._client.register_script(_DELETE_USER)
        self._gate = Gate(f"Redis session store {url}")

    @contextmanager
    def _call(self) -> Iterator[None]:
        """One call to Redis: refused once closed, waited for by ``close``, and with Redis's
        errors translated."""
        with self._gate.passage(), _translated():
            yield

    # -- keys ----------------------------------------------------------------------------

    def _user_base(self, tenant_id: str, user_id: str) -> str:
        return f"{self.prefix}:s:{_part(tenant_id)}:{_part(user_id)}:"

    def _session_keys(self, key: SessionKey) -> list[str]:
        """log, meta, the user's index, the idle index: the KEYS of the session scripts."""
        base = self._user_base(key.tenant_id, key.user_id) + _part(key.session_id)
        user_index = self._user_index(key.tenant_id, key.user_id)
        return [f"{base}:log", f"{base}:meta", user_index, self._idle_index]

    def _user_index(self, tenant_id: str, user_id: str) -> str:
        return f"{self.prefix}:u:{_part(tenant_id)}:{_part(user_id)}"

    @property
    def _idle_index(self) -> str:
        return f"{self.prefix}:idle"

    @staticmethod
    def _idle_member(key: SessionKey) -> str:
        return ":".join(_part(part) for part in key)

    def _ttl(self) -> int:
        return self.ttl_s or 0

    # -- the log -------------------------------------------------------------------------

    def append(self, key: SessionKey, messages: Sequence[Message]) -> int:
        batch = list(messages)
        check_turn_order(None, batch)  # within the batch; the server checks the stored turn
        first = next((m.turn_id for m in batch if m.turn_id is not None), None)
        newest = last_turn_id(batch)
        args: list[str | int] = [
            now_ms(),
            self._ttl(),
            _part(key.session_id),
            self._idle_member(key),
            "" if first is None else str(first),
            "" if newest is None else str(newest),
            *(message.model_dump_json() for message in batch),
        ]
        with self._call():
            ok, value = self._append(keys=self._session_keys(key), args=args)
        if not ok:
            check_turn_order(int(value), batch)  # raises, naming the message at fault
            raise StoreError(f"Redis refused turn {first} after turn {value} but Python took it")
        return int(value)

    def read(self, key: SessionKey, start: int = 0, stop: int | None = None) -> list[Message]:
        bounds = _redis_range(start, stop)
        if bounds is None:
            return []
        with self._call():
            bodies = cast(list[str], self._client.lrange(self._session_keys(key)[0], *bounds))
        return [Message.model_validate_json(body) for body in bodies]

    def length(self, key: SessionKey) -> int:
        with self._call():
            return int(self._client.llen(self._session_keys(key)[0]))

    # -- state ---------------------------------------------------------------------------

    def state(self, key: SessionKey) -> SessionState:
        with self._call():
            body, revision, ended_at = cast(
                list[str | None],
                self._client.hmget(self._session_keys(key)[1], ["state", "revision", "ended_at"]),
            )
        state = SessionState.model_validate_json(body) if body else SessionState()
        return state.model_copy(
            update={
                "revision": int(revision or 0),
                "ended_at": None if ended_at is None else int(ended_at),
            }
        )

    def save_state(self, key: SessionKey, state: SessionState) -> SessionState:
        args: list[str | int] = [
            state.revision,
            # revision and ended_at have their own fields, the only copy, so they cannot
            # disagree with the JSON.
            state.model_dump_json(exclude={"revision", "ended_at"}),
            "" if state.ended_at is None else str(state.ended_at),
            now_ms(),
            self._ttl(),
            _part(key.session_id),
            self._idle_member(key),
        ]
        with self._call():
            ok, revision = self._save_state(keys=self._session_keys(key), args=args)
        if not ok:
            raise ConflictError(
                f"session {key.session_id!r} state changed (revision "
                f"{revision}, not {state.revision})"
            )
        return state.model_copy(update={"revision": int(revision)})

    # -- listing -------------------------------------------------------------------------

    def sessions(self, tenant_id: str, user_id: str) -> list[SessionInfo]:
        index = self._user_index(tenant_id, user_id)
        base = self._user_base(tenant_id, user_id)
        with self._call():
            ids = cast(list[str], self._client.zrange(index, 0, -1))
            pipe = self._client.pipeline(transaction=False)
            for encoded in ids:
                pipe.hmget(f"{base}{encoded}:meta", ["updated_at", "ended_at"])
                pipe.llen(f"{base}{encoded}:log")
            replies = pipe.execute()
            found: list[SessionInfo] = []
            expired: list[str] = []
            for encoded, (updated_at, ended_at), length in zip(
                ids, replies[::2], replies[1::2], strict=True
            ):
                if updated_at is None:  # its keys expired; the index outlived them
                    expired.append(encoded)
                    continue
                ended = None if ended_at is None else int(ended_at)
                found.append(SessionInfo(unquote(encoded), int(length), int(updated_at), ended))
            if expired:
                self._client.zrem(index, *expired)
        return sorted(found, key=lambda info: (-info.updated_at, info.session_id))

    def idle(self, before_ms: int, limit: int = 100) -> list[SessionKey]:
        found: list[SessionKey] = []
        offset = 0
        with self._call():
            while len(found) < limit:
                members = cast(
                    list[str],
                    self._client.zrangebyscore(
                        self._idle_index, "-inf", f"({before_ms}", start=offset, num=limit
                    ),
                )
                if not members:
                    break
                live = self._live_members(members)
                found.extend(live)
                offset += len(live)
        return found[:limit]

    def _live_members(self, members: list[str]) -> list[SessionKey]:
        """The sessions of ``members`` that still exist; the others leave the idle index."""
        keys = [SessionKey(*(unquote(part) for part in member.split(":"))) for member in members]
        pipe = self._client.pipeline(transaction=False)
        for key in keys:
            pipe.exists(self._session_keys(key)[1])
        exists = cast(list[int], pipe.execute())
        gone = [member for member, there in zip(members, exists, strict=True) if not there]
        if gone:
            self._client.zrem(self._idle_index, *gone)
        return [key for key, there in zip(keys, exists, strict=True) if there]

    # -- deletes -------------------------------------------------------------------------

    def delete(self, key: SessionKey) -> bool:
        args = [_part(key.session_id), self._idle_member(key)]
        with self._call():
            return bool(self._delete(keys=self._session_keys(key), args=args))

    def delete_user(self, tenant_id: str, user_id: str) -> int:
        keys = [self._user_index(tenant_id, user_id), self._idle_index]
        args = [self._user_base(tenant_id, user_id), f"{_part(tenant_id)}:{_part(user_id)}:"]
        with self._call():
            return int(self._delete_user(keys=keys, args=args))

    # -- texts ---------------------------------------------------------------------------

    def _texts(self, tenant_id: str) -> str:
        return f"{self.prefix}:text:{_part(tenant_id)}"

    def get_text(self, tenant_id: str, name: str) -> str | None:
        with self._call():
            return cast(str | None, self._client.hget(self._texts(tenant_id), name))

    def put_text(self, tenant_id: str, name: str, text: str) -> None:
        with self._call():
            self._client.hset(self._texts(tenant_id), name, text)

    def delete_text(self, tenant_id: str, name: str) -> bool:
        with self._call():
            return bool(self._client.hdel(self._texts(tenant_id), name))

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Refuse new calls, wait for those running, then close the connection pool."""
        self._gate.close()
        self._client.close()

    def __repr__(self) -> str:
        return f"RedisSessionStore({self.url!r}, prefix={self.prefix!r})"


__all__ = ["DEFAULT_URL", "RedisSessionStore"]
