"""Running the app over real HTTP: in the foreground (``chatmem serve``) or in a background
thread on a free port (the demo, the benchmarks, end-to-end tests)."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI

from chatmem.errors import ChatmemError
from chatmem.server.config import ServerSection, ServiceConfig


class ServiceThread:
    """``app`` served by uvicorn in a daemon thread; ``url`` is its base URL once entered.

    ::

        with ServiceThread(create_app(config)) as service:
            httpx.get(f"{service.url}/healthz")
    """

    def __init__(self, app: FastAPI, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", access_log=False, lifespan="on"
        )
        self.server = uvicorn.Server(self.config)
        self._thread = threading.Thread(target=self.server.run, name="chatmem-http", daemon=True)
        self.url = ""

    def __enter__(self) -> ServiceThread:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ChatmemError("the service did not start (see its log)")
            time.sleep(0.02)
        sockets = [s for server in self.server.servers for s in server.sockets]
        host, port = sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(30)


#: LogRecord attributes that are not a caller's ``extra`` fields.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the record's ``extra``
    fields (the write policy logs batch_id, tenant_id, user_id, stored, updated…)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter()
        if fmt == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


#: Where ``serve`` hands the config to its worker processes.
CONFIG_ENV = "CHATMEM_SERVICE_CONFIG_JSON"


def app_from_environment() -> FastAPI:
    """The app of one worker process (``uvicorn --factory``), built from ``CONFIG_ENV``."""
    from chatmem.server.app import create_app

    config = ServiceConfig.model_validate_json(os.environ[CONFIG_ENV])
    configure_logging(config.log_level, config.log_format)
    tune_interpreter(config.server)
    return create_app(config)


def tune_interpreter(server: ServerSection) -> None:
    """The interpreter settings of a serving process: its switch interval
    (``server.switch_interval_ms``; 0 leaves Python's own). Set by ``serve`` and in each
    worker process, never by ``create_app``: an application that mounts chatmem keeps its
    own."""
    if server.switch_interval_ms > 0:
        sys.setswitchinterval(server.switch_interval_ms / 1000)


def _stopped(signum: int, frame: object) -> None:
    """The handler uvicorn hands a signal back to once it has stopped: nothing left to do."""


def serve(config: ServiceConfig) -> None:
    """Serve in the foreground until interrupted, in ``server.workers`` processes. Each
    worker has its own runtime over the same files: SQLite (WAL) takes writers from many
    processes, and the extraction queue leases each batch to one worker."""
    from chatmem.server.app import create_app

    configure_logging(config.log_level, config.log_format)
    server = config.server
    tune_interpreter(server)
    options: dict[str, Any] = {
        "host": server.host,
        "port": server.port,
        "log_level": config.log_level,
        "access_log": False,
        "log_config": None,
        # Requests in flight get the grace period; then the lifespan drains the turn stores.
        "timeout_graceful_shutdown": max(1, round(server.shutdown_grace_s)),
    }
    if server.workers == 1:
        # uvicorn stops gracefully on SIGTERM and SIGINT, then raises the signal again for the
        # handler it found. A stop it completed is a clean exit (status 0, no traceback), so
        # the handler it finds does nothing.
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, _stopped)
        uvicorn.run(create_app(config), **options)
        return
    os.environ[CONFIG_ENV] = config.model_dump_json()
    uvicorn.run(
        "chatmem.server.serving:app_from_environment",
        factory=True,
        workers=server.workers,
        **options,
    )


__all__ = [
    "CONFIG_ENV",
    "JsonFormatter",
    "ServiceThread",
    "app_from_environment",
    "configure_logging",
    "serve",
    "tune_interpreter",
]
