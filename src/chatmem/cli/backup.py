"""``chatmem backup`` and ``chatmem restore``: the SQLite files of the embedded default.

A backup is a folder. It holds ``service.db`` (keys, response chains, the extraction outbox,
sessions, webhook deliveries), ``sessions.db`` where ``memory.sessions.store`` is a SQLite
file of its own, ``chatmem.db`` (the memory store) and ``manifest.json`` (chatmem's version,
each file's size, sha256 and schema versions from ``chatmem_schema``, the time of the
backup). Each file is copied with SQLite's online backup API in one step, so it is one
consistent snapshot while ``chatmem serve`` writes (WAL mode). The service's file is copied
before the memories: a batch extracted between the two copies is queued again after a
restore (batches are idempotent) rather than lost.

``restore`` checks the manifest (checksums, no schema newer than this release), copies each
file next to its place under a temporary name, checks it again, and only then renames the
files into place, putting back what was there if a rename fails. Stores on servers
(PostgreSQL, Redis, Milvus, Qdrant) are backed up with their own tools; ``backup`` names them.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import parse_qsl, urlsplit

import pydantic
import typer

from chatmem.cli.console import err, out
from chatmem.cli.store import shown
from chatmem.errors import ConfigError, StoreError, ValidationError
from chatmem.records import utcnow, validation_error
from chatmem.stores import check_store_uri
from chatmem.stores.schema_versions import SCHEMA_TABLE, component_of
from chatmem.stores.sqlite.file import BUSY_TIMEOUT_MS, sqlite3
from chatmem.version import __version__

#: The manifest's name in a backup folder, and the version of its layout.
MANIFEST = "manifest.json"
FORMAT = 1

Part = Literal["service", "sessions", "memory"]
#: Each part's file name in a backup, in the order they are copied.
FILE_NAMES: dict[Part, str] = {
    "service": "service.db",
    "sessions": "sessions.db",
    "memory": "chatmem.db",
}
_CHUNK = 1 << 20
_WAL_FILES = ("-wal", "-shm", "-journal")

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="The service's YAML config (as given to serve)."),
]


class FileEntry(pydantic.BaseModel):
    """One database of a backup, as ``manifest.json`` lists it."""

    part: Part
    name: str
    source: str
    size: int = pydantic.Field(ge=0)
    sha256: str = pydantic.Field(pattern=r"^[0-9a-f]{64}$")
    schema_versions: dict[str, int]

    @pydantic.model_validator(mode="after")
    def _named_for_its_part(self) -> FileEntry:
        # The name is joined to the backup folder: only the part's own name may be used.
        if self.name != FILE_NAMES[self.part]:
            raise ValueError(f"{self.part} must be named {FILE_NAMES[self.part]}")
        return self


class Manifest(pydantic.BaseModel):
    """``manifest.json``: what a backup holds."""

    format: int
    chatmem_version: str
    created_at: datetime
    files: list[FileEntry] = pydantic.Field(min_length=1)

    @pydantic.model_validator(mode="after")
    def _each_part_once(self) -> Manifest:
        parts = [entry.part for entry in self.files]
        if len(set(parts)) != len(parts):
            raise ValueError("a part is listed twice")
        return self


@dataclass(frozen=True)
class Database:
    """A SQLite file the configuration uses, and which part of chatmem's state it holds."""

    part: Part
    path: Path

    @property
    def name(self) -> str:
        return FILE_NAMES[self.part]


@dataclass(frozen=True)
class Layout:
    """Where the configured service keeps its state: its SQLite files, in backup order,
    and one line for each store kept elsewhere, naming that store's own backup tools."""

    databases: list[Database]
    elsewhere: list[str]

    def target(self, part: Part) -> Path:
        for database in self.databases:
            if database.part == part:
                return database.path
        where = "; ".join(self.elsewhere) or "it is kept in memory"
        raise ConfigError(f"the backup holds {FILE_NAMES[part]}, but here {where}")


# -- the commands ------------------------------------------------------------------------------


def backup(
    dest: Annotated[Path, typer.Argument(help="A new (or empty) folder for the backup.")],
    config: ConfigOption = None,
) -> None:
    """Copy the SQLite databases of the service (service.db, chatmem.db) into a new folder
    with a manifest, consistently while `chatmem serve` runs. Stores on servers are named
    with the tools that back them up (pg_dump, Redis BGSAVE, ...)."""
    layout = configured_layout(config)
    present = [d for d in layout.databases if _holds_data(d.path)]
    if not present:
        raise ConfigError(_nothing_to_copy(layout))
    entries = write_backup(present, dest)
    for line in layout.elsewhere:
        err.print(f"note: {line}", soft_wrap=True)
    listed = ", ".join(f"{e.name} ({_size(e.size)})" for e in entries)
    out.print(f"backed up {listed} to {dest}", soft_wrap=True)


def restore(
    src: Annotated[Path, typer.Argument(help="A folder written by chatmem backup.")],
    config: ConfigOption = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace databases that exist (stop chatmem serve first)."),
    ] = False,
) -> None:
    """Put a backup's databases back where the configuration keeps them, after checking
    its manifest (checksums, schema versions); all files or none. An existing database is
    replaced only with --force."""
    manifest = read_manifest(src)
    layout = configured_layout(config)
    targets = {entry.part: layout.target(entry.part) for entry in manifest.files}
    live = [path for path in targets.values() if _holds_data(path)]
    if live and not force:
        raise ConfigError(
            f"{live[0]} exists; restore would replace it: stop chatmem serve, then rerun "
            "with --force"
        )
    restore_files(src, manifest, targets)
    listed = ", ".join(f"{e.name} to {targets[e.part]}" for e in manifest.files)
    out.print(
        f"restored {listed} (backup of {manifest.created_at.isoformat()}, "
        f"chatmem {manifest.chatmem_version})",
        soft_wrap=True,
    )


# -- where the state is ------------------------------------------------------------------------


def configured_layout(config: Path | None) -> Layout:
    """The SQLite files and other stores of the service ``config`` (with ``--store`` and
    the environment) describes, as ``chatmem serve`` would open them."""
    from chatmem.cli.service import _service_store
    from chatmem.server.config import load_config
    from chatmem.server.runtime import SERVICE_DB, default_data_dir, service_location

    loaded = load_config(config)
    data_dir = Path(loaded.server.data_dir) if loaded.server.data_dir else default_data_dir()
    store = _service_store(loaded) or f"sqlite:///{(data_dir / 'chatmem.db').resolve()}"
    shared = service_location(store) is not None
    found: dict[Part, Path] = {}
    elsewhere: list[str] = []
    if not shared:
        found["service"] = data_dir / SERVICE_DB
    sessions = loaded.memory.sessions.store
    if sessions is not None:
        _place("sessions", sessions, found, elsewhere)
    _place("memory", store, found, elsewhere)
    return Layout(_databases(found), elsewhere)


def _databases(found: dict[Part, Path]) -> list[Database]:
    """One Database per file, in backup order; a file two parts share is named for the
    first of service, memory, sessions."""
    chosen: dict[Path, Part] = {}
    for part in ("service", "memory", "sessions"):
        if part in found:
            chosen.setdefault(found[part].resolve(), part)
    order = list(FILE_NAMES)
    ours = [Database(part, found[part]) for part in chosen.values()]
    return sorted(ours, key=lambda d: order.index(d.part))


def _place(part: Part, uri: str, found: dict[Part, Path], elsewhere: list[str]) -> None:
    path = sqlite_path(uri)
    if path is not None:
        found[part] = path
    elif line := native_tools(uri):
        elsewhere.append(line)


def sqlite_path(uri: str) -> Path | None:
    """The SQLite file a store URI names (None: not SQLite, or ``:memory:``)."""
    if "://" in uri and urlsplit(uri).scheme != "sqlite":
        return None
    return check_store_uri(uri)


def native_tools(uri: str) -> str | None:
    """One line: how the store at ``uri``, not a SQLite file, is backed up with its own
    tools (None for a store in memory)."""
    parts = urlsplit(uri)
    what = shown(uri)
    if parts.scheme in {"postgresql", "postgres"}:
        prefix = dict(parse_qsl(parts.query)).get("prefix") or "chatmem"
        return (
            f"{what} is PostgreSQL: back it up with pg_dump --format=custom "
            f"--schema={prefix} --schema={prefix}_service, restore with pg_restore"
        )
    if parts.scheme in {"redis", "rediss"}:
        return f"{what} is Redis: back it up with BGSAVE (copy dump.rdb) or its AOF files"
    local = not parts.netloc or parts.scheme == "qdrant+local"
    if parts.scheme.startswith("milvus"):
        if local:
            return f"{what} is a Milvus Lite folder: copy it while chatmem serve is stopped"
        return f"{what} is a Milvus server: back it up with milvus-backup"
    if parts.scheme.startswith("qdrant"):
        if local:
            return f"{what} is a Qdrant local folder: copy it while chatmem serve is stopped"
        return f"{what} is a Qdrant server: back it up with Qdrant snapshots"
    return None


def _nothing_to_copy(layout: Layout) -> str:
    if layout.elsewhere:
        return "; ".join(layout.elsewhere) + " (chatmem backup copies SQLite files only)"
    paths = " or ".join(str(d.path) for d in layout.databases)
    return f"nothing to back up: no database at {paths or 'any path'}"


def _holds_data(path: Path) -> bool:
    """Whether a database is there: a file with something in it (or in its WAL)."""
    wal = path.with_name(path.name + "-wal")
    return any(p.is_file() and p.stat().st_size > 0 for p in (path, wal))


# -- backup ------------------------------------------------------------------------------------


def write_backup(databases: list[Database], dest: Path) -> list[FileEntry]:
    """Copy ``databases`` into the new folder ``dest``, with the manifest. The files are
    written to a folder beside it, renamed to ``dest`` at the end: a copy that fails
    leaves nothing at ``dest``."""
    _check_dest(dest)
    staging = dest.with_name(f".{dest.name}.partial-{secrets.token_hex(4)}")
    staging.mkdir()
    try:
        entries = [_copy_online(database, staging / database.name) for database in databases]
        manifest = Manifest(
            format=FORMAT, chatmem_version=__version__, created_at=utcnow(), files=entries
        )
        _write_synced(staging / MANIFEST, manifest.model_dump_json(indent=2).encode())
        os.replace(staging, dest)
    except BaseException:  # boundary: remove the partial copy, then re-raise
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _sync_folder(dest.parent)
    return entries


def _check_dest(dest: Path) -> None:
    if dest.exists() and not (dest.is_dir() and not any(dest.iterdir())):
        raise ValidationError(f"{dest} exists and is not an empty folder", field="DEST")
    if not dest.parent.is_dir():
        raise ValidationError(f"no folder {dest.parent}", field="DEST")


def _copy_online(database: Database, copy: Path) -> FileEntry:
    """``database`` copied to ``copy`` in one step of SQLite's backup API: one snapshot,
    read while writers go on (WAL). The copy is left in rollback-journal mode, one
    self-contained file that can be checked read-only."""
    with _sqlite(database.path, read_only=True) as source, _sqlite(copy) as target:
        source.backup(target)
        target.execute("PRAGMA journal_mode = DELETE").fetchone()
        versions = schema_versions(target)
    size, sha256 = _digest(copy)
    return FileEntry(
        part=database.part,
        name=database.name,
        source=str(database.path.resolve()),
        size=size,
        sha256=sha256,
        schema_versions=versions,
    )


def schema_versions(conn: sqlite3.Connection) -> dict[str, int]:
    """Each component's latest schema version in the database's ``chatmem_schema``."""
    if not conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (SCHEMA_TABLE,)
    ).fetchone():
        return {}
    rows = conn.execute(f"SELECT component, MAX(version) FROM {SCHEMA_TABLE} GROUP BY component")
    return {str(component): int(version) for component, version in rows}


# -- restore -----------------------------------------------------------------------------------


def read_manifest(src: Path) -> Manifest:
    """The manifest of the backup folder ``src``, checked: its shape and format, each
    file's size and sha256, and no schema newer than this release."""
    path = src / MANIFEST
    if not path.is_file():
        raise ValidationError(f"{src} is not a chatmem backup (no {MANIFEST})", field="SRC")
    try:
        manifest = Manifest.model_validate_json(path.read_bytes())
    except pydantic.ValidationError as exc:
        raise ValidationError(f"{path}: {validation_error(exc)}") from None
    if manifest.format > FORMAT:
        raise ValidationError(
            f"{path}: format {manifest.format} is newer than this chatmem's ({FORMAT})"
        )
    for entry in manifest.files:
        check_schema(entry.name, entry.schema_versions)
        _check_file(src / entry.name, entry)
    return manifest


def _check_file(path: Path, entry: FileEntry) -> None:
    if not path.is_file():
        raise ValidationError(f"{path} is missing from the backup; nothing was restored")
    if _digest(path) != (entry.size, entry.sha256):
        raise ValidationError(
            f"{path} does not match its sha256 in {MANIFEST}: the backup is damaged; "
            "nothing was restored"
        )


def check_schema(name: str, versions: dict[str, int]) -> None:
    """Refuse a database whose schema this release does not know (written by a newer one)."""
    known = known_versions()
    for component, version in sorted(versions.items()):
        if version > known.get(component, 0):
            ours = known.get(component, "none")
            raise ValidationError(
                f"{name}: schema {component} version {version} is newer than this chatmem "
                f"{__version__} ({ours}); upgrade chatmem to restore it"
            )


def known_versions() -> dict[str, int]:
    """The schema version this release migrates each component kept in SQLite to."""
    from chatmem.server import auth, leases, response_store, webhooks
    from chatmem.sessions import sqlite as sessions
    from chatmem.stores.sqlite import schema
    from chatmem.worker import sqlite as outbox

    tables = {
        "chatmem_migrations": schema.MIGRATIONS,
        auth.MIGRATIONS_TABLE: auth.MIGRATIONS,
        leases.MIGRATIONS_TABLE: leases.SQLITE_MIGRATIONS,
        response_store.MIGRATIONS_TABLE: response_store.MIGRATIONS,
        "webhook_migrations": webhooks._MIGRATIONS,
        outbox.MIGRATIONS_TABLE: outbox.MIGRATIONS,
        sessions.MIGRATIONS_TABLE: sessions.MIGRATIONS,
    }
    return {component_of(table): len(scripts) for table, scripts in tables.items()}


def restore_files(src: Path, manifest: Manifest, targets: dict[Part, Path]) -> None:
    """Copy each file of the backup beside its target under a temporary name and check
    the copy; then rename them all into place. On a failure nothing is changed."""
    token = secrets.token_hex(4)
    prepared: list[tuple[Path, Path]] = []
    try:
        for entry in manifest.files:
            target = targets[entry.part]
            temp = target.with_name(f".{target.name}.restore-{token}")
            prepared.append((temp, target))
            _prepare(src / entry.name, temp, entry)
        _swap(prepared, token)
    except BaseException:  # boundary: remove the temporary copies, then re-raise
        for temp, _ in prepared:
            temp.unlink(missing_ok=True)
        raise


def _prepare(source: Path, temp: Path, entry: FileEntry) -> None:
    temp.parent.mkdir(parents=True, exist_ok=True)
    if _copy_hashing(source, temp) != (entry.size, entry.sha256):
        raise ValidationError(f"{source} changed while it was read; nothing was restored")
    with _sqlite(temp, read_only=True) as conn:
        check = str(conn.execute("PRAGMA quick_check").fetchone()[0])
        versions = schema_versions(conn)
    if check != "ok":
        raise ValidationError(f"{source} is not a sound database ({check}); nothing was restored")
    check_schema(entry.name, versions)


def _swap(prepared: list[tuple[Path, Path]], token: str) -> None:
    """Rename each temporary copy to its target, the file there (and its WAL, shared
    memory and journal, which belong to it alone) moved aside first; if a rename fails,
    everything moved is put back."""
    moved: list[tuple[Path, Path]] = []
    placed: list[Path] = []
    try:
        for temp, target in prepared:
            for suffix in ("", *_WAL_FILES):
                original = target.with_name(target.name + suffix)
                if original.exists():
                    aside = original.with_name(f".{original.name}.replaced-{token}")
                    os.replace(original, aside)
                    moved.append((original, aside))
            os.replace(temp, target)
            placed.append(target)
    except OSError:
        for target in placed:
            target.unlink(missing_ok=True)
        for original, aside in reversed(moved):
            os.replace(aside, original)
        raise
    for _, aside in moved:
        aside.unlink(missing_ok=True)
    for folder in {target.parent for _, target in prepared}:
        _sync_folder(folder)


# -- files -------------------------------------------------------------------------------------


@contextmanager
def _sqlite(path: Path, *, read_only: bool = False) -> Iterator[sqlite3.Connection]:
    """A connection to ``path`` (``read_only``: never created nor written); SQLite's
    errors become StoreError naming the file."""
    uri = path.resolve().as_uri() + ("?mode=ro" if read_only else "")
    try:
        with closing(sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)) as conn:
            yield conn
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: {exc}") from exc


def _digest(path: Path) -> tuple[int, str]:
    """The size and sha256 of a file."""
    hashed = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            hashed.update(chunk)
            size += len(chunk)
    return size, hashed.hexdigest()


def _copy_hashing(source: Path, copy: Path) -> tuple[int, str]:
    """Copy a file, synced to disk; returns the size and sha256 of what was written."""
    hashed = hashlib.sha256()
    size = 0
    with source.open("rb") as reading, copy.open("wb") as writing:
        while chunk := reading.read(_CHUNK):
            writing.write(chunk)
            hashed.update(chunk)
            size += len(chunk)
        writing.flush()
        os.fsync(writing.fileno())
    return size, hashed.hexdigest()


def _write_synced(path: Path, data: bytes) -> None:
    with path.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _sync_folder(folder: Path) -> None:
    """Make the renames in ``folder`` durable (POSIX; elsewhere a no-op)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


__all__ = [
    "FILE_NAMES",
    "FORMAT",
    "MANIFEST",
    "Database",
    "FileEntry",
    "Layout",
    "Manifest",
    "backup",
    "check_schema",
    "configured_layout",
    "known_versions",
    "native_tools",
    "read_manifest",
    "restore",
    "restore_files",
    "schema_versions",
    "sqlite_path",
    "write_backup",
]
