"""Running the app over real HTTP: in the foreground (``chatmem serve``) or in a background
thread on a free port (the demo, the benchmarks, end-to-end tests)."""

from __future__ import annotations

import logging
import threading
import time

import uvicorn
from fastapi import FastAPI

from chatmem.errors import ChatmemError


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


def serve(app: FastAPI, *, host: str, port: int, log_level: str = "info") -> None:
    """Serve in the foreground until interrupted."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


__all__ = ["ServiceThread", "serve"]
