"""The ``chatmem`` command line: store, search and manage memories in any store.

What it prints leaves through two doors (``chatmem.cli.console``). People read a
``PlainConsole``: no string is ever taken as Rich markup, and control characters are shown
escaped, so a stored ``[/]``, a ``[link=…]`` or an ESC sequence prints as the text it is.
Programs read ``print_json``. Errors leave through one boundary, ``main``: one line,
``error: …``, and exit status 1 (``--debug`` or ``$CHATMEM_DEBUG`` shows the traceback
instead).

The modules: ``commands`` (the app, its global options and the order of the commands),
``memories`` (add, search, list, get, history, forget, stats), ``import_export``,
``service`` (serve, demo, openapi, config, warmup), ``maintain``, and what they share:
``options``, ``store`` (the store and ids), ``console`` and ``errors``.
"""

from chatmem.cli.commands import app, main, version
from chatmem.cli.console import PlainConsole, err, out, printable
from chatmem.cli.import_export import OnConflict, export, import_file
from chatmem.cli.memories import add, forget, get, history, list_memories, search, stats
from chatmem.cli.options import (
    DEBUG_ENV,
    IdArgument,
    JsonFlag,
    OwnerOption,
    ProjectOption,
    SessionOption,
    UserOption,
)
from chatmem.cli.service import config_app, config_check, demo, openapi, serve, warmup
from chatmem.cli.store import MIN_PREFIX, SHORT_ID, short_ids

__all__ = [
    "DEBUG_ENV",
    "MIN_PREFIX",
    "SHORT_ID",
    "IdArgument",
    "JsonFlag",
    "OnConflict",
    "OwnerOption",
    "PlainConsole",
    "ProjectOption",
    "SessionOption",
    "UserOption",
    "add",
    "app",
    "config_app",
    "config_check",
    "demo",
    "err",
    "export",
    "forget",
    "get",
    "history",
    "import_file",
    "list_memories",
    "main",
    "openapi",
    "out",
    "printable",
    "search",
    "serve",
    "short_ids",
    "stats",
    "version",
    "warmup",
]
