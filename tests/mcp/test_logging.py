"""Building the MCP server (as ``create_app`` does) leaves the application's logging alone."""

from __future__ import annotations

import logging
from pathlib import Path

from chatmem.server import ServiceConfig, create_app


def test_create_app_configures_no_root_logger(tmp_path: Path) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers[:] = []  # as a fresh program has it (pytest's own handlers put aside)
    root.setLevel(logging.WARNING)
    try:
        create_app(ServiceConfig.parse({"server": {"data_dir": str(tmp_path)}}))
        found_handlers, found_level = root.handlers[:], root.level
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert found_handlers == []
    assert found_level == logging.WARNING
