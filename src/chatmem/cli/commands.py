"""The ``chatmem`` command: the app, its global options, every command in the order
``--help`` lists them, and ``main``, the one boundary errors leave through: one line,
``error: …``, and exit status 1 (``--debug`` or ``$CHATMEM_DEBUG`` shows the traceback
instead).
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from chatmem.cli import backup, import_export, memories, service
from chatmem.cli.console import out, print_error
from chatmem.cli.errors import described
from chatmem.cli.maintain import maintain_app
from chatmem.cli.options import DEBUG_ENV, given, utf8
from chatmem.errors import ChatmemError
from chatmem.mcp.cli import mcp as mcp_command
from chatmem.version import __version__

app = typer.Typer(
    name="chatmem",
    help="chatmem: a memory layer for chat agents. Stores are chosen with --store URI "
    "(sqlite:///file.db, milvus:///dir, milvus://host:19530) or $CHATMEM_STORE.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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
            callback=utf8,
        ),
    ] = None,
    tenant: Annotated[str, typer.Option("--tenant", "-t", help="Tenant id.", callback=utf8)] = (
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
    given.store = store
    given.tenant = tenant
    given.debug = debug


def version() -> None:
    """Print chatmem's version (also: chatmem --version)."""
    out.print(__version__)


app.command()(memories.add)
app.command()(memories.search)
app.command("list")(memories.list_memories)
app.command()(memories.get)
app.command()(memories.history)
app.command()(memories.forget)
app.command()(import_export.export)
app.command("import")(import_export.import_file)
app.command()(backup.backup)
app.command()(backup.restore)
app.command()(memories.stats)
app.command()(service.demo)
app.command()(service.serve)
app.command()(service.openapi)
app.add_typer(service.config_app, name="config")
app.add_typer(maintain_app, name="maintain")
# `chatmem mcp`: the MCP server over stdio (the chatmem[mcp] extra; importing the command
# does not import mcp).
app.command("mcp")(mcp_command)
app.command()(service.warmup)
app.command()(version)


def main() -> None:
    """Entry point: run the CLI; a chatmem, file or encoding error is printed as one line
    and exit status 1 (``--debug`` or $CHATMEM_DEBUG: the traceback)."""
    try:
        app()
    except (ChatmemError, OSError, UnicodeError) as exc:
        if given.debug or os.environ.get(DEBUG_ENV):
            raise
        print_error(described(exc))
        raise SystemExit(1) from None


__all__ = ["app", "main", "version"]
