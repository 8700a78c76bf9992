"""The service's commands: ``serve``, ``demo``, ``openapi``, ``config check``, and
``warmup`` (the embedding model made ready for a first search).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from chatmem.cli.console import err, out, print_json
from chatmem.cli.options import given
from chatmem.cli.store import shown
from chatmem.embeddings import LocalEmbedder
from chatmem.errors import ChatmemError, ConfigError
from chatmem.stores import ENV_VAR as STORE_ENV
from chatmem.stores import check_store_uri
from chatmem.version import __version__

if TYPE_CHECKING:
    from chatmem.server.config import ServiceConfig

#: ``chatmem config``: its commands are added below.
config_app = typer.Typer(help="Check and show the service's configuration.", no_args_is_help=True)


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
    memory store is chatmem's own --store (chatmem --store URI serve), else the config's
    memory.store, else $CHATMEM_STORE, else chatmem.db in server.data_dir: the file the
    other commands use by default."""
    from chatmem.server.config import ServerSection, load_config
    from chatmem.server.demo import scripted_model
    from chatmem.server.serving import serve as run
    from chatmem.testing import ScriptedOpenAIServer

    loaded = load_config(config)
    overrides: dict[str, Any] = {}
    named = {"host": host, "port": port, "workers": workers}
    if any(v is not None for v in named.values()):
        server = {**loaded.server.model_dump(), **{k: v for k, v in named.items() if v is not None}}
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
        ("--store", given.store),
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
        return shown(uri)
    from chatmem.server.runtime import default_data_dir

    return str(Path(settings.server.data_dir or default_data_dir()) / "chatmem.db")


def openapi() -> None:
    """Print the service's OpenAPI spec (JSON), as committed in docs/openapi.json."""
    from chatmem.server.app import create_app
    from chatmem.server.config import ServiceConfig

    spec = create_app(ServiceConfig()).openapi()
    sys.stdout.write(json.dumps(spec, indent=2, sort_keys=True) + "\n")


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
        print_json(loaded.model_dump(mode="json", exclude={"auth": {"admin_key"}}))


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
            f"{quantize.cache_dir()}: each start derives it again (about 3-4 s)"
        )
        return
    size = cached.stat().st_size / 2**20
    out.print(f"warm in {took:.1f} s; fast query model: {cached} ({size:.1f} MiB)")


__all__ = ["config_app", "config_check", "demo", "openapi", "serve", "warmup"]
