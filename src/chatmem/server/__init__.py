"""The chatmem service: an OpenAI-compatible chat proxy with memory, the Responses API, and
a REST API for memories, sessions, keys and tenants. Build it with ``create_app(config)``;
run it with ``chatmem serve``."""

from chatmem.server.app import create_app
from chatmem.server.config import ServiceConfig, load_config
from chatmem.server.runtime import Runtime

__all__ = ["Runtime", "ServiceConfig", "create_app", "load_config"]
