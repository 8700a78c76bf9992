"""The red-team tests drive the real service through the fixtures of ``tests/server``."""

from tests.server.conftest import make_service, upstream

__all__ = ["make_service", "upstream"]
