"""The ``chatmem`` command line: store, search and manage memories in any store."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from chatmem import __version__
from chatmem.errors import ChatmemError
from chatmem.long_term import LongTermMemory
from chatmem.records import Filter, MemoryRecord, MemoryType, SearchResult
from chatmem.stores import default_store_uri

app = typer.Typer(
    name="chatmem",
    help="chatmem: a memory layer for chat agents. Stores are chosen with --store URI "
    "(sqlite:///file.db, milvus:///dir, milvus://host:19530) or $CHATMEM_STORE.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


class _Options:
    store: str | None = None
    tenant: str = "default"


_options = _Options()

UserOption = Annotated[str, typer.Option("--user", "-u", help="The user the memories belong to.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@app.callback()
def _main(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            "-s",
            help="Store URI (default: $CHATMEM_STORE or a SQLite file in your data directory).",
        ),
    ] = None,
    tenant: Annotated[str, typer.Option("--tenant", "-t", help="Tenant id.")] = "default",
) -> None:
    _options.store = store
    _options.tenant = tenant


@contextmanager
def _memory(uri: str | None = None) -> Iterator[LongTermMemory]:
    with LongTermMemory.open(uri or _options.store) as memory:
        yield memory


def _metadata(raw: str | None) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc.msg}", param_hint="--metadata") from None
    if not isinstance(value, dict):
        raise typer.BadParameter("must be a JSON object", param_hint="--metadata")
    return value


def _as_json(result: SearchResult | MemoryRecord) -> dict[str, Any]:
    record = result.record if isinstance(result, SearchResult) else result
    data: dict[str, Any] = {
        "id": record.id,
        "content": record.text,
        "metadata": record.user_metadata,
        "type": record.type.value,
        "user_id": record.user_id,
        "session_id": record.session_id,
        "created_at": record.time.created_at.isoformat(),
        "version": record.metadata.version,
    }
    if isinstance(result, SearchResult):
        data["score"] = round(result.score, 6)
    return data


def _table(rows: list[SearchResult] | list[MemoryRecord], title: str) -> Table:
    table = Table(title=title, show_lines=False)
    scored = bool(rows) and isinstance(rows[0], SearchResult)
    if scored:
        table.add_column("score", justify="right")
    for name in ("id", "type", "created", "content"):
        table.add_column(name, overflow="fold")
    for row in rows:
        record = row.record if isinstance(row, SearchResult) else row
        cells = [
            record.id,
            record.type.value,
            record.time.created_at.strftime("%Y-%m-%d %H:%M"),
            record.text,
        ]
        if isinstance(row, SearchResult):
            cells.insert(0, f"{row.score:.3f}")
        table.add_row(*cells)
    return table


@app.command()
def add(
    text: Annotated[str, typer.Argument(help="The text to remember.")],
    user: UserOption,
    session: Annotated[str | None, typer.Option(help="Session id.")] = None,
    metadata: Annotated[str | None, typer.Option(help="Free-form metadata, a JSON object.")] = None,
    memory_type: Annotated[MemoryType, typer.Option("--type", help="Memory type.")] = (
        MemoryType.SEMANTIC
    ),
) -> None:
    """Store TEXT as a memory of USER; prints the new memory's id."""
    with _memory() as memory:
        (record,) = memory.add(
            text,
            user_id=user,
            tenant_id=_options.tenant,
            session_id=session,
            metadata=_metadata(metadata),
            type=memory_type,
        )
    out.print(record.id)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    user: UserOption,
    k: Annotated[int, typer.Option("--k", "-k", help="How many results.")] = 5,
    threshold: Annotated[float | None, typer.Option(help="Minimum fused score, 0..1.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Hybrid search of USER's memories."""
    with _memory() as memory:
        hits = memory.search(
            query, user_id=user, tenant_id=_options.tenant, k=k, threshold=threshold
        )
    if as_json:
        print(json.dumps([_as_json(hit) for hit in hits], indent=2))
    else:
        out.print(_table(hits, f"{len(hits)} result(s) for {query!r}"))


@app.command("list")
def list_memories(
    user: Annotated[str | None, typer.Option("--user", "-u", help="Only this user.")] = None,
    limit: Annotated[int, typer.Option(help="Page size.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="Cursor printed by the last page.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List memories oldest first, a page at a time."""
    with _memory() as memory:
        page = memory.list(
            Filter(tenant_id=_options.tenant, user_id=user), limit=limit, cursor=cursor
        )
    if as_json:
        print(
            json.dumps(
                {"memories": [_as_json(r) for r in page.records], "next_cursor": page.next_cursor},
                indent=2,
            )
        )
        return
    out.print(_table(page.records, f"{len(page.records)} memories"))
    if page.next_cursor:
        out.print(f"next page: --cursor {page.next_cursor}")


@app.command()
def get(
    memory_id: Annotated[str, typer.Argument(help="Memory id.")],
    user: Annotated[str | None, typer.Option("--user", "-u", help="Owner (checked).")] = None,
) -> None:
    """Print one memory, every field, as JSON."""
    with _memory() as memory:
        record = memory.get(memory_id, tenant_id=_options.tenant, user_id=user)
    print(record.model_dump_json(indent=2))


@app.command()
def history(
    memory_id: Annotated[str, typer.Argument(help="Memory id.")],
    user: Annotated[str | None, typer.Option("--user", "-u", help="Owner (checked).")] = None,
) -> None:
    """Every version of a memory, oldest first."""
    with _memory() as memory:
        entries = memory.history(memory_id, tenant_id=_options.tenant, user_id=user)
    table = Table(title=f"history of {memory_id}")
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
    memory_id: Annotated[str | None, typer.Option("--id", help="Only this memory.")] = None,
    session: Annotated[str | None, typer.Option(help="Only this session.")] = None,
    project: Annotated[str | None, typer.Option(help="Only this project.")] = None,
) -> None:
    """Delete one memory (--id) or every memory of USER (narrowed by session/project)."""
    with _memory() as memory:
        if memory_id:
            memory.delete(memory_id, tenant_id=_options.tenant, user_id=user, reason="cli forget")
            removed = 1
        else:
            scope = Filter(
                tenant_id=_options.tenant, user_id=user, session_id=session, project_id=project
            )
            removed = memory.delete_all(scope, reason="cli forget")
    out.print(f"forgot {removed} memor{'y' if removed == 1 else 'ies'}")


@app.command()
def export(
    user: Annotated[str | None, typer.Option("--user", "-u", help="Only this user.")] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File (default stdout).")
    ] = None,
) -> None:
    """Write memories as JSON lines (records with vectors); `import` reads them back."""
    scope = Filter(tenant_id=_options.tenant, user_id=user)
    with _memory() as memory:
        if output is None:
            count = memory.export_jsonl(scope, sys.stdout)
        else:
            with output.open("w", encoding="utf-8") as handle:
                count = memory.export_jsonl(scope, handle)
    err.print(f"exported {count} memories")


@app.command("import")
def import_file(
    file: Annotated[str, typer.Argument(help="A JSONL file written by export, or - for stdin.")],
) -> None:
    """Store every memory of an export file; all or nothing."""
    text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    lines = text.splitlines()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as progress:
        progress.add_task(f"importing {len(lines)} lines", total=None)
        with _memory() as memory:
            count = memory.import_jsonl(lines)
    out.print(f"imported {count} memories")


@app.command()
def stats(user: Annotated[str | None, typer.Option("--user", "-u")] = None) -> None:
    """What the store holds."""
    uri = _options.store or default_store_uri()
    with _memory(uri) as memory:
        count = memory.count(Filter(tenant_id=_options.tenant, user_id=user))
        embedding = memory.store.embedding
    table = Table(show_header=False)
    table.add_row("store", uri)
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
            "--data-dir", help="Where the demo keeps its files (default: a new temp folder)."
        ),
    ] = None,
) -> None:
    """The whole loop offline, through the service over HTTP: a fact told in one session is
    injected in a new one by the chat proxy, and never reaches another user. A scripted
    model stands in for the LLM."""
    from chatmem.server.demo import run_demo

    out.rule("chatmem demo: the chat proxy, end to end")
    started = time.perf_counter()
    run_demo(lambda line: out.print(line, highlight=False, markup=False), data_dir=data_dir)
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
    embedded default (SQLite, local embedder, offline extractor) unless configured."""
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
            f"(upstream: {settings.upstream.base_url or 'none: chat answers 503'})",
            highlight=False,
        )
        run(settings)


def _check_exposure(settings: Any) -> None:
    loopback = settings.server.host in {"127.0.0.1", "localhost", "::1"}
    if not loopback and settings.auth.anonymous_tenant is not None:
        raise ChatmemError(
            f"refusing to serve anonymous requests on {settings.server.host}: set "
            "auth.anonymous_tenant to null and give keys, or bind to 127.0.0.1"
        )


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
    out.print(f"{path}: ok", highlight=False)
    out.print(f"  store: {loaded.memory.store_uri() or 'default SQLite file'}", highlight=False)
    out.print(f"  upstream: {loaded.upstream.base_url or 'none'}", highlight=False)
    out.print(f"  models: {', '.join(r.value for r in models.roles()) or 'none (offline)'}",
              highlight=False)  # fmt: skip
    if show:
        out.print_json(loaded.model_dump_json(exclude={"auth": {"admin_key"}}))


@app.command()
def version() -> None:
    """Print chatmem's version."""
    out.print(__version__)


def main() -> None:
    """Entry point: run the CLI, printing chatmem errors as one line and exit status 1."""
    try:
        app()
    except ChatmemError as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
