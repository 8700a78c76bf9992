"""``chatmem mcp``: the MCP server over stdio, for desktop and IDE clients.

The command opens the store as the other commands do (``--store``, else the ``chatmem``
command's own ``--store``, else ``$CHATMEM_STORE``, else the default file) and serves it
for one tenant, default user and set of roles. Its stdout carries the protocol, so what it
logs goes to stderr. Importing this module does not import ``mcp``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer

from chatmem.errors import ChatmemError, ConfigError
from chatmem.stores import ENV_VAR as STORE_ENV
from chatmem.stores import check_store_uri, default_store_uri

TENANT_ENV = "CHATMEM_TENANT"
USER_ENV = "CHATMEM_USER"
ROLES_ENV = "CHATMEM_ROLES"


def mcp(
    ctx: typer.Context,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            "-s",
            help=f"Store URI (default: chatmem's --store, ${STORE_ENV}, or the default file).",
        ),
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", "-t", help=f"Tenant id (or ${TENANT_ENV}; default 'default')."),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            "-u",
            envvar=USER_ENV,
            help="The user the tools act for when a call names none.",
        ),
    ] = None,
    roles: Annotated[
        str | None,
        typer.Option(
            "--roles",
            envvar=ROLES_ENV,
            help="Comma-separated roles to read with: memories restricted to other roles stay "
            "hidden. Default: read every memory, as the other commands do.",
        ),
    ] = None,
) -> None:
    """Serve memory to an MCP client over stdio (remember, recall, get_context, forget,
    list, history, update; a user's profile and each memory as resources)."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    try:
        _serve(
            store or _inherited(ctx, "store") or os.environ.get(STORE_ENV) or None,
            tenant or _inherited(ctx, "tenant") or os.environ.get(TENANT_ENV) or "default",
            user,
            _roles(roles),
        )
    except ChatmemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None


def _serve(store: str | None, tenant: str, user: str | None, roles: frozenset[str] | None) -> None:
    from chatmem.long_term import LongTermMemory
    from chatmem.mcp.server import run_stdio

    uri = store or default_store_uri()
    where = check_store_uri(uri)
    if where is not None and store is not None and not where.parent.is_dir():
        raise ConfigError(f"no folder {where.parent} for the store {uri}; check --store")
    if where is not None:
        where.parent.mkdir(parents=True, exist_ok=True)
    with LongTermMemory.open(uri) as memory:
        run_stdio(memory, tenant_id=tenant, user_id=user, roles=roles)


def _inherited(ctx: typer.Context, name: str) -> str | None:
    """The ``chatmem`` command's own option ``name`` (``chatmem --store X mcp``), if any."""
    parent = ctx.parent
    value = parent.params.get(name) if parent is not None else None
    return value if isinstance(value, str) and value else None


def _roles(text: str | None) -> frozenset[str] | None:
    if text is None:
        return None
    return frozenset(role.strip() for role in text.split(",") if role.strip())


def main() -> None:
    """``python -m chatmem.mcp``: the command on its own."""
    typer.run(mcp)


__all__ = ["ROLES_ENV", "TENANT_ENV", "USER_ENV", "main", "mcp"]
