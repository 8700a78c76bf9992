"""The ``chatmem`` command line: store, search and manage memories in any store.

What it prints leaves through two doors. People read a ``PlainConsole``: no string is ever
taken as Rich markup, and control characters are shown escaped, so a stored ``[/]``, a
``[link=…]`` or an ESC sequence prints as the text it is. Programs read ``_print_json``.
Errors leave through one boundary, ``main``: one line, ``error: …``, and exit status 1
(``--debug`` or ``$CHATMEM_DEBUG`` shows the traceback instead).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from chatmem import maintenance_cli
from chatmem import retrieval as retrieval_
from chatmem.embeddings import Embedder, LocalEmbedder
from chatmem.errors import (
    ChatmemError,
    ConfigError,
    ImportFormatError,
    NotFoundError,
    ValidationError,
)
from chatmem.long_term import LongTermMemory
from chatmem.mcp.cli import mcp as mcp_command
from chatmem.records import Filter, MemoryRecord, MemoryType, Vector
from chatmem.stores import ENV_VAR as STORE_ENV
from chatmem.stores import check_store_uri, default_store_uri
from chatmem.version import __version__

if TYPE_CHECKING:
    from chatmem.server.config import ServiceConfig

#: Set (to anything) to see the traceback of an error instead of its one line.
DEBUG_ENV = "CHATMEM_DEBUG"
#: The shortest id prefix tables show (longer where two ids of one table share it).
SHORT_ID = 8
#: The shortest id prefix a command accepts.
MIN_PREFIX = 4

# C0 and C1 control characters but tab and newline, DEL, bidirectional overrides, and the
# lone surrogates that stand for bytes that were not UTF-8.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` with its control characters (ESC, CR, C1, bidi overrides) and lone
    surrogates written as escapes (``\\x1b``), so stored text cannot drive the terminal."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class PlainConsole(Console):
    """A Rich console that renders every string as plain, printable text: never markup,
    never emoji codes, control characters escaped. Style comes only from ``Text`` objects
    the CLI builds itself from its own words."""

    def render_str(self, text: str, **options: Any) -> Text:
        options.update(markup=False, emoji=False, highlight=False)
        return super().render_str(printable(text), **options)


app = typer.Typer(
    name="chatmem",
    help="chatmem: a memory layer for chat agents. Stores are chosen with --store URI "
    "(sqlite:///file.db, milvus:///dir, milvus://host:19530) or $CHATMEM_STORE.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = PlainConsole(highlight=False)
err = PlainConsole(stderr=True, highlight=False)


def _print_json(data: Any) -> None:
    """``data`` as JSON for programs: text as UTF-8, control characters and lone surrogates
    as ``\\u`` escapes."""
    text = json.dumps(data, indent=2, ensure_ascii=False)
    sys.stdout.write(_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n")


def _print_error(message: str) -> None:
    line = Text.assemble(("error:", "bold red"), " ", " ".join(printable(message).split()))
    err.print(line, soft_wrap=True)  # one line, however long: never wrapped


def _count(n: int, noun: str = "memory", plural: str = "memories") -> str:
    return f"{n} {noun if n == 1 else plural}"


class _Options:
    store: str | None = None
    tenant: str = "default"
    debug: bool = False


_options = _Options()


def _utf8(param: typer.CallbackParam, value: Any) -> Any:
    """Refuse text that was not UTF-8: the shell hands such bytes over as lone surrogates."""
    for item in value if isinstance(value, list | tuple) else [value]:
        if isinstance(item, str) and _SURROGATE.search(item):
            raw = item.encode("utf-8", "surrogateescape")
            name = param.opts[0] if param.param_type_name == "option" else str(param.name).upper()
            raise ValidationError(f"not UTF-8 text: {raw!r}", field=name)
    return value


UserOption = Annotated[
    str, typer.Option("--user", "-u", help="The user the memories belong to.", callback=_utf8)
]
OwnerOption = Annotated[
    str | None, typer.Option("--user", "-u", help="Only this user.", callback=_utf8)
]
SessionOption = Annotated[str | None, typer.Option(help="Only this session.", callback=_utf8)]
ProjectOption = Annotated[str | None, typer.Option(help="Only this project.", callback=_utf8)]
IdArgument = Annotated[
    str, typer.Argument(help="Memory id, or a unique prefix of it.", callback=_utf8)
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _show_version(value: bool) -> None:
    if value:
        out.print(__version__)
        raise typer.Exit()


@app.callback()
def _main(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            "-s",
            help="Store URI (default: $CHATMEM_STORE or a SQLite file in your data directory).",
            callback=_utf8,
        ),
    ] = None,
    tenant: Annotated[str, typer.Option("--tenant", "-t", help="Tenant id.", callback=_utf8)] = (
        "default"
    ),
    debug: Annotated[
        bool, typer.Option("--debug", help=f"Show tracebacks (or set ${DEBUG_ENV}).")
    ] = False,
    _version: Annotated[
        bool,
        typer.Option("--version", help="Print the version.", callback=_show_version, is_eager=True),
    ] = False,
) -> None:
    _options.store = store
    _options.tenant = tenant
    _options.debug = debug


# -- the store ---------------------------------------------------------------------------------


def _chosen_store() -> str | None:
    """The store the user named: --store, else $CHATMEM_STORE; None: the default file."""
    return _options.store or os.environ.get(STORE_ENV) or None


@contextmanager
def _memory(
    *, create: bool = False, wrap_embedder: Callable[[Embedder], Embedder] | None = None
) -> Iterator[LongTermMemory]:
    """The long-term memory of the chosen store. Only ``create`` (add, import) may make a
    store, and only in a folder that exists (or the default one): a read of a store that is
    not there says so, rather than answering from a new, empty file. ``wrap_embedder``
    wraps the local embedder (import counts what it embeds)."""
    uri = _chosen_store() or default_store_uri()
    where = check_store_uri(uri)
    if where is not None and not create and not where.exists():
        raise ConfigError(f"no store at {where}; add a memory first or check --store")
    if where is not None and create and _chosen_store() and not where.parent.is_dir():
        raise ConfigError(f"no folder {where.parent} for the store {uri}; check --store")
    embedder = None if wrap_embedder is None else wrap_embedder(LocalEmbedder())
    with LongTermMemory.open(uri, embedder=embedder) as memory:
        yield memory


def _scope(user: str | None = None, **narrow: Any) -> Filter:
    return Filter.checked({"tenant_id": _options.tenant, "user_id": user, **narrow}, "filter")


def _shown(uri: str) -> str:
    """``uri`` with its password, if any, hidden."""
    parts = urlsplit(uri)
    if not parts.password:
        return uri
    user = parts.netloc.rpartition("@")[0].split(":", 1)[0]
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


# -- ids ---------------------------------------------------------------------------------------


def short_ids(ids: Iterable[str], shortest: int = SHORT_ID) -> dict[str, str]:
    """Each id's shortest prefix of at least ``shortest`` characters that no other of
    ``ids`` starts with (as git abbreviates commits)."""
    ordered = sorted(set(ids))
    short = {}
    for i, memory_id in enumerate(ordered):
        neighbours = ordered[max(i - 1, 0) : i] + ordered[i + 1 : i + 2]
        shared = max((len(os.path.commonprefix([memory_id, n])) for n in neighbours), default=0)
        short[memory_id] = memory_id[: max(shortest, shared + 1)]
    return short


def _resolve_id(memory: LongTermMemory, given: str, user: str | None) -> str:
    """The id ``given`` names: itself if a memory has it, else the one memory whose id
    starts with it. None does: ``given`` as it is (the command reports it not found, or
    finds a deleted memory's history); more than one: a ValidationError."""
    if len(given) < MIN_PREFIX:
        return given
    scope = _scope(user)
    try:
        return memory.get(given, tenant_id=scope.tenant_id, user_id=user).id
    except NotFoundError:
        pass
    matches = [r.id for r in _every_record(memory, scope) if r.id.startswith(given)]
    if len(matches) > 1:
        shown = ", ".join(sorted(short_ids(matches, len(given) + 1).values())[:5])
        raise ValidationError(
            f"{given!r} is ambiguous: {len(matches)} memories start with it ({shown}…)"
        )
    return matches[0] if matches else given


def _every_record(memory: LongTermMemory, scope: Filter) -> Iterator[MemoryRecord]:
    cursor: str | None = None
    while True:
        page = memory.list(scope, limit=500, cursor=cursor)
        yield from page.records
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


# -- tables and JSON ---------------------------------------------------------------------------


def _record_json(record: MemoryRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "content": record.text,
        "metadata": record.user_metadata,
        "type": record.type.value,
        "user_id": record.user_id,
        "session_id": record.session_id,
        "created_at": record.time.created_at.isoformat(),
        "version": record.metadata.version,
    }


def _hit_json(hit: retrieval_.RetrievedMemory) -> dict[str, Any]:
    return {
        **_record_json(hit.record),
        "score": round(hit.score, 6),
        "relevance": round(hit.relevance, 6),
    }


def _table(
    title: str,
    records: Sequence[MemoryRecord],
    hits: Sequence[retrieval_.RetrievedMemory] = (),
) -> Table:
    table = Table(title=title, show_lines=False)
    if hits:
        table.add_column("score", justify="right")
        table.add_column("relevance", justify="right")
    for name in ("id", "type", "created", "content"):
        table.add_column(name, overflow="fold")
    short = short_ids(r.id for r in records)
    for i, record in enumerate(records):
        cells = [
            short[record.id],
            record.type.value,
            record.time.created_at.strftime("%Y-%m-%d %H:%M"),
            record.text,
        ]
        if hits:
            cells[:0] = [f"{hits[i].score:.3f}", f"{hits[i].relevance:.3f}"]
        table.add_row(*cells)
    return table


def _metadata(raw: str | None) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"not JSON: {exc.msg}", field="--metadata") from None
    if not isinstance(value, dict):
        raise ValidationError("must be a JSON object", field="--metadata")
    return value


# -- commands ----------------------------------------------------------------------------------


@app.command()
def add(
    text: Annotated[str, typer.Argument(help="The text to remember.", callback=_utf8)],
    user: UserOption,
    session: Annotated[str | None, typer.Option(help="Session id.", callback=_utf8)] = None,
    project: Annotated[str | None, typer.Option(help="Project id.", callback=_utf8)] = None,
    metadata: Annotated[
        str | None, typer.Option(help="Free-form metadata, a JSON object.", callback=_utf8)
    ] = None,
    memory_type: Annotated[MemoryType, typer.Option("--type", help="Memory type.")] = (
        MemoryType.SEMANTIC
    ),
    expires: Annotated[
        str | None,
        typer.Option(
            help="Forget it at this time (ISO 8601, UTC unless a zone is given) or after"
            " this long (90s, 30m, 12h, 7d).",
            callback=_utf8,
        ),
    ] = None,
) -> None:
    """Store TEXT as a memory of USER; prints the new memory's id (one per part: a text
    longer than a memory holds is stored in parts)."""
    expires_at = maintenance_cli.expiry(expires) if expires is not None else None
    with _memory(create=True) as memory:
        records = memory.add(
            text,
            user_id=user,
            tenant_id=_options.tenant,
            session_id=session,
            project_id=project,
            metadata=_metadata(metadata),
            type=memory_type,
            expires_at=expires_at,
        )
    for record in records:
        out.print(record.id)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for.", callback=_utf8)],
    user: UserOption,
    k: Annotated[int, typer.Option("--k", "-k", help="How many results.")] = 5,
    session: SessionOption = None,
    project: ProjectOption = None,
    types: Annotated[
        list[MemoryType] | None, typer.Option("--type", help="Only this type (repeatable).")
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option(
            help="Minimum relevance, 0..1 (default: memory.default_similarity_threshold, 0.6)."
        ),
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="Every hit, whatever its relevance.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Hybrid search of USER's memories, ranked as the chat proxy ranks them."""
    if show_all and threshold is not None:
        raise ValidationError("give --threshold or --all, not both", field="--all")
    cutoff = 0.0 if show_all else _default_threshold() if threshold is None else threshold
    with _memory() as memory:
        hits = retrieval_.search(
            memory,
            query,
            user_id=user,
            tenant_id=_options.tenant,
            k=k,
            threshold=cutoff,
            types=types or None,
            project_id=project,
            session_id=session,
        )
    if as_json:
        _print_json([_hit_json(hit) for hit in hits])
        return
    title = f"{_count(len(hits), 'result', 'results')} for {query!r}"
    out.print(_table(title, [hit.record for hit in hits], hits) if hits else title)
    if not hits and not show_all:
        err.print(f"none reached a relevance of {cutoff:g}; --all shows every hit")


def _default_threshold() -> float:
    """The service's ``memory.default_similarity_threshold`` (with CHATMEM__ overrides)."""
    from chatmem.server.config import load_config

    return load_config().memory.default_similarity_threshold


@app.command("list")
def list_memories(
    user: OwnerOption = None,
    limit: Annotated[int, typer.Option(help="Page size.")] = 50,
    cursor: Annotated[
        str | None, typer.Option(help="Cursor printed by the last page.", callback=_utf8)
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List memories oldest first, a page at a time."""
    with _memory() as memory:
        page = memory.list(_scope(user), limit=limit, cursor=cursor)
    if as_json:
        _print_json(
            {
                "memories": [_record_json(r) for r in page.records],
                "next_cursor": page.next_cursor,
            }
        )
        return
    title = _count(len(page.records))
    out.print(_table(title, page.records) if page.records else title)
    if page.next_cursor:
        out.print(f"next page: --cursor {page.next_cursor}")


@app.command()
def get(
    memory_id: IdArgument,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="Owner (checked).", callback=_utf8)
    ] = None,
) -> None:
    """Print one memory, every field, as JSON."""
    with _memory() as memory:
        found = _resolve_id(memory, memory_id, user)
        record = memory.get(found, tenant_id=_options.tenant, user_id=user)
    _print_json(record.model_dump(mode="json"))


@app.command()
def history(
    memory_id: IdArgument,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="Owner (checked).", callback=_utf8)
    ] = None,
) -> None:
    """Every version of a memory, oldest first."""
    with _memory() as memory:
        found = _resolve_id(memory, memory_id, user)
        entries = memory.history(found, tenant_id=_options.tenant, user_id=user)
    table = Table(title=f"history of {found}")
    for name in ("version", "event", "at", "content", "reason"):
        table.add_column(name, overflow="fold")
    for entry in entries:
        shown = entry.new or entry.old
        table.add_row(
            str(entry.version),
            entry.event.value,
            entry.at.isoformat(),
            shown.text if shown else "",
            entry.reason or "",
        )
    out.print(table)


@app.command()
def forget(
    user: UserOption,
    memory_id: Annotated[
        str | None,
        typer.Option("--id", help="Only this memory (or a unique prefix).", callback=_utf8),
    ] = None,
    session: SessionOption = None,
    project: ProjectOption = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask before deleting more than one.")
    ] = False,
) -> None:
    """Delete one memory (--id) or every memory of USER (narrowed by session/project);
    asks first on a terminal, and needs --yes elsewhere."""
    with _memory() as memory:
        if memory_id:
            found = _resolve_id(memory, memory_id, user)
            memory.delete(found, tenant_id=_options.tenant, user_id=user, reason="cli forget")
            removed = 1
        else:
            scope = _scope(user, session_id=session, project_id=project)
            count = memory.count(scope)
            if count and not yes and not _confirm(f"forget {_count(count)} of {user!r}"):
                out.print("nothing forgotten")
                return
            removed = memory.delete_all(scope, reason="cli forget")
    out.print(f"forgot {_count(removed)}")


def _confirm(action: str) -> bool:
    """Ask before ``action`` on a terminal; elsewhere there is no one to ask, so refuse."""
    if not sys.stdin.isatty():
        raise ValidationError(f"{action} needs --yes when stdin is not a terminal")
    return typer.confirm(f"{printable(action)}?", default=False, err=True)


@app.command()
def export(
    user: OwnerOption = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File (default stdout).")
    ] = None,
) -> None:
    """Write memories as JSON lines (records with vectors); `import` reads them back."""
    if output is not None:
        _check_output(output)
    scope = _scope(user)
    with _memory() as memory:
        if output is None:
            count = memory.export_jsonl(scope, sys.stdout)
        else:
            with output.open("w", encoding="utf-8") as handle:
                count = memory.export_jsonl(scope, handle)
    err.print(f"exported {_count(count)}")


def _check_output(output: Path) -> None:
    if output.is_dir():
        raise ValidationError(f"{output} is a folder; give a file name", field="--output")
    if not output.parent.is_dir():
        raise ValidationError(f"no folder {output.parent}", field="--output")


class OnConflict(enum.StrEnum):
    """What ``import`` does with a memory whose id its user already holds."""

    FAIL = "fail"
    SKIP = "skip"
    REPLACE = "replace"


@app.command("import")
def import_file(
    file: Annotated[str, typer.Argument(help="A JSONL file written by export, or - for stdin.")],
    on_conflict: Annotated[
        OnConflict,
        typer.Option(
            "--on-conflict",
            help="A memory already stored: fail (nothing is imported), skip it, or replace it.",
        ),
    ] = OnConflict.FAIL,
) -> None:
    """Store every memory of an export file; all or nothing."""
    lines = _read_lines(file)
    entries = sum(1 for line in lines if line.strip())
    with _ImportProgress() as shown, _memory(create=True, wrap_embedder=shown.embedder) as memory:
        try:
            count = memory.import_jsonl(shown.reading(lines), on_conflict=on_conflict.value)
        except ValidationError as exc:
            if exc.field == "id" and "already exists" in exc.message:
                hint = "; nothing was imported (--on-conflict skip or replace)"
                raise ValidationError(exc.message + hint, field="id") from None
            raise
    message = f"imported {_count(count)}"
    if on_conflict is OnConflict.SKIP and entries > count:
        message += f", skipped {entries - count} already stored"
    out.print(message)


def _read_lines(file: str) -> list[str]:
    """The lines of ``file`` (``-``: stdin), which must be UTF-8 text."""
    data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        name = "stdin" if file == "-" else file
        raise ValidationError(
            f"{name} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


class _ImportProgress:
    """Import's progress bar, on stderr and only on a terminal: the lines read, then the
    texts embedded (the lines that came without a vector), each with a count and the time
    left; then the one write, which has no count."""

    #: Texts embedded between two moves of the bar.
    BATCH = 256

    def __init__(self) -> None:
        self._bar = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            _CountAndTimeLeft(),
            console=err,
            transient=True,
            disable=not err.is_terminal,
        )
        self._task = self._bar.add_task("reading", total=None, unit="lines")

    def __enter__(self) -> _ImportProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def reading(self, lines: Sequence[str]) -> Iterator[str]:
        """Hand ``lines`` on, counting them as the import reads them."""
        self._stage("reading", len(lines), "lines")
        for line in lines:
            yield line
            self._bar.advance(self._task)
        self._stage("storing", None, "")

    def embedder(self, inner: Embedder) -> Embedder:
        """``inner``, embedding in batches that move the bar."""
        return _CountedEmbedder(inner, self)

    def embedding(self, texts: Sequence[str], embed: Callable[[Sequence[str]], Vector]) -> Vector:
        self._stage("embedding", len(texts), "texts")
        rows = []
        for start in range(0, len(texts), self.BATCH):
            rows.append(embed(texts[start : start + self.BATCH]))
            self._bar.advance(self._task, len(rows[-1]))
        self._stage("storing", None, "")
        return np.concatenate(rows) if rows else embed(texts)

    def _stage(self, name: str, total: int | None, unit: str) -> None:
        # A new task, not a reset: a reset keeps the old total and the old speed.
        self._bar.remove_task(self._task)
        self._task = self._bar.add_task(name, total=total, unit=unit)


class _CountedEmbedder:
    """An embedder that reports to an ``_ImportProgress`` what it embeds."""

    def __init__(self, inner: Embedder, progress: _ImportProgress) -> None:
        self._inner = inner
        self._progress = progress

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    def embed(self, texts: Sequence[str]) -> Vector:
        return self._progress.embedding(texts, self._inner.embed)


class _CountAndTimeLeft(TimeRemainingColumn):
    """``120/3000 texts 0:00:14``; nothing for a stage with no count."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text("")
        done = f"{int(task.completed)}/{int(task.total)} {task.fields['unit']} "
        return Text.assemble((done, "progress.download"), super().render(task))


@app.command()
def stats(user: OwnerOption = None) -> None:
    """What the store holds."""
    uri = _chosen_store() or default_store_uri()
    with _memory() as memory:
        count = memory.count(_scope(user))
        embedding = memory.store.embedding
    table = Table(show_header=False)
    table.add_row("store", _shown(uri))
    table.add_row("tenant", _options.tenant)
    if user:
        table.add_row("user", user)
    table.add_row("memories", str(count))
    if embedding:
        table.add_row("embedding", f"{embedding.model} ({embedding.dimension} dimensions)")
    out.print(table)


@app.command()
def demo(
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir", help="Where the demo keeps its files (default: a temp folder, removed)."
        ),
    ] = None,
) -> None:
    """The whole loop offline, through the service over HTTP: a fact told in one session is
    injected in a new one by the chat proxy, and never reaches another user. A scripted
    model stands in for the LLM."""
    from chatmem.server.demo import run_demo

    out.rule("chatmem demo: the chat proxy, end to end")
    started = time.perf_counter()
    run_demo(out.print, data_dir=data_dir)
    out.print(f"\ndone in {time.perf_counter() - started:.1f} s. Next: chatmem serve")


@app.command()
def serve(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="A YAML config file (see docs).")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Bind address (config: server.host).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (config: server.port).")] = None,
    workers: Annotated[
        int | None, typer.Option(help="Worker processes (config: server.workers).")
    ] = None,
    upstream: Annotated[
        str | None,
        typer.Option(help="The model's OpenAI-compatible base URL (config: upstream.base_url)."),
    ] = None,
    scripted_upstream: Annotated[
        bool,
        typer.Option(
            "--scripted-upstream",
            help="Answer chats with the offline scripted model of the demo (no LLM needed).",
        ),
    ] = False,
) -> None:
    """Run the service: the chat proxy, the Responses API and the memory API, on the
    embedded default (SQLite, local embedder, offline extractor) unless configured. The
    memory store is --store, else the config's memory.store, else $CHATMEM_STORE, else
    chatmem.db in server.data_dir: the file the other commands use by default."""
    from chatmem.server.config import ServerSection, load_config
    from chatmem.server.demo import scripted_model
    from chatmem.server.serving import serve as run
    from chatmem.testing import ScriptedOpenAIServer

    loaded = load_config(config)
    overrides: dict[str, Any] = {}
    given = {"host": host, "port": port, "workers": workers}
    if any(v is not None for v in given.values()):
        server = {**loaded.server.model_dump(), **{k: v for k, v in given.items() if v is not None}}
        overrides["server"] = ServerSection.model_validate(server)
    store = _service_store(loaded)
    if store is not None:
        overrides["memory"] = loaded.memory.model_copy(update={"store": store})
    with contextlib.ExitStack() as stack:
        if scripted_upstream:
            model = stack.enter_context(ScriptedOpenAIServer(responder=scripted_model))
            upstream = model.base_url
        if upstream is not None:
            overrides["upstream"] = loaded.upstream.model_copy(update={"base_url": upstream})
        settings = loaded.model_copy(update=overrides)
        _check_exposure(settings)
        err.print(
            f"chatmem {__version__} on http://{settings.server.host}:{settings.server.port} "
            f"(store: {_store_shown(store, settings)}; "
            f"upstream: {settings.upstream.base_url or 'none: chat answers 503'})"
        )
        run(settings)


def _check_exposure(settings: Any) -> None:
    loopback = settings.server.host in {"127.0.0.1", "localhost", "::1"}
    if not loopback and settings.auth.anonymous_tenant is not None:
        raise ChatmemError(
            f"refusing to serve anonymous requests on {settings.server.host}: set "
            "auth.anonymous_tenant to null and give keys, or bind to 127.0.0.1"
        )


def _service_store(loaded: ServiceConfig) -> str | None:
    """The memory store the service opens, checked: --store, else the config's
    memory.store (or memory.milvus.address), else $CHATMEM_STORE; None: chatmem.db in
    server.data_dir. A URI that cannot name a store is a ConfigError naming its source."""
    named = [
        ("--store", _options.store),
        ("memory.store", loaded.memory.store),
        ("memory.milvus.address", loaded.memory.store_uri()),
        (f"${STORE_ENV}", os.environ.get(STORE_ENV)),
    ]
    for source, uri in named:
        if uri:
            try:
                check_store_uri(uri)
            except ConfigError as exc:
                raise ConfigError(f"{source}: {exc}") from None
            return uri
    return None


def _store_shown(uri: str | None, settings: ServiceConfig) -> str:
    if uri is not None:
        return _shown(uri)
    from chatmem.server.runtime import default_data_dir

    return str(Path(settings.server.data_dir or default_data_dir()) / "chatmem.db")


@app.command()
def openapi() -> None:
    """Print the service's OpenAPI spec (JSON), as committed in docs/openapi.json."""
    from chatmem.server.app import create_app
    from chatmem.server.config import ServiceConfig

    spec = create_app(ServiceConfig()).openapi()
    sys.stdout.write(json.dumps(spec, indent=2, sort_keys=True) + "\n")


config_app = typer.Typer(help="Check and show the service's configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("check")
def config_check(
    path: Annotated[Path, typer.Argument(help="The YAML config file.")],
    show: Annotated[bool, typer.Option("--show", help="Print the config with defaults.")] = False,
) -> None:
    """Validate a config file (with CHATMEM__… overrides applied); errors name the key."""
    from chatmem.server.config import load_config

    loaded = load_config(path)
    models = loaded.models()
    try:
        store = _service_store(loaded)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    out.print(f"{path}: ok")
    out.print(f"  store: {_store_shown(store, loaded)}")
    out.print(f"  upstream: {loaded.upstream.base_url or 'none'}")
    out.print(f"  models: {', '.join(r.value for r in models.roles()) or 'none (offline)'}")
    if show:
        _print_json(loaded.model_dump(mode="json", exclude={"auth": {"admin_key"}}))


app.add_typer(
    maintenance_cli.command(_memory, lambda: _options.tenant, out.print, _print_json),
    name="maintain",
)

# `chatmem mcp`: the MCP server over stdio (the chatmem[mcp] extra; importing the command
# does not import mcp).
app.command("mcp")(mcp_command)


@app.command()
def warmup() -> None:
    """Prepare now what the first search would: load the embedding model and derive its
    fast query copy into the cache ($CHATMEM_CACHE_DIR, else ~/.cache/chatmem). Run it at
    install (an image build) so a read-only container never needs to write it."""
    from chatmem.embeddings import quantize

    began = time.perf_counter()
    embedder = LocalEmbedder().warm()
    cached = embedder.fast_model_cache()
    took = time.perf_counter() - began
    if cached is None:
        out.print(
            f"warm in {took:.1f} s, but the fast query model could not be cached in "
            f"{quantize.cache_dir()}: each start derives it again (about 3 s)"
        )
        return
    size = cached.stat().st_size / 2**20
    out.print(f"warm in {took:.1f} s; fast query model: {cached} ({size:.1f} MiB)")


@app.command()
def version() -> None:
    """Print chatmem's version (also: chatmem --version)."""
    out.print(__version__)


# -- the error boundary ------------------------------------------------------------------------


def _described(exc: BaseException) -> str:
    """An error as the user should read it: the field they sent, not an internal path."""
    if isinstance(exc, ImportFormatError):
        message = exc.message.removeprefix(f"line {exc.line}: ")
        return f"line {exc.line}: {exc.field}: {message}" if exc.field else str(exc)
    if isinstance(exc, ValidationError):
        message = exc.message.removeprefix("Value error, ")
        return f"{_public_field(exc.field)}: {message}" if exc.field else message
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    if isinstance(exc, UnicodeError):
        return f"not UTF-8 text: {exc}"
    return str(exc)


#: The options that set a record's or a filter's fields.
_OPTION_OF = {
    "content": "TEXT",
    "user_id": "--user",
    "tenant_id": "--tenant",
    "session_id": "--session",
    "project_id": "--project",
    "metadata": "--metadata",
    "user_metadata": "--metadata",
    "type": "--type",
    "k": "--k",
    "threshold": "--threshold",
    "cursor": "--cursor",
    "limit": "--limit",
}


def _public_field(field: str) -> str:
    """The option the user gave for an internal field: ``messages[0].content.raw`` is the
    TEXT of ``add``, ``filter.user_id`` is ``--user``."""
    inner = re.sub(r"^(messages\[\d+\]|filter)\.", "", field).removesuffix(".raw")
    return _OPTION_OF.get(inner, field)


def main() -> None:
    """Entry point: run the CLI; a chatmem, file or encoding error is printed as one line
    and exit status 1 (``--debug`` or $CHATMEM_DEBUG: the traceback)."""
    try:
        app()
    except (ChatmemError, OSError, UnicodeError) as exc:
        if _options.debug or os.environ.get(DEBUG_ENV):
            raise
        _print_error(_described(exc))
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
