"""The OpenAPI spec: served, committed and true; schemathesis finds no 5xx on any route."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from chatmem.server import ServiceConfig, create_app
from tests.server.conftest import ADMIN_KEY


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: object, value: object) -> bytes:
    """Import bodies are JSON lines, documented as a string; send generated ones as text."""
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


#: Generated requests per operation (a few thousand in all).
EXAMPLES = 60

SPEC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_the_committed_spec_is_the_served_one(service: TestClient) -> None:
    served = service.get("/openapi.json").json()
    assert served == create_app(ServiceConfig()).openapi()
    assert json.loads(SPEC.read_text()) == served, (
        "docs/openapi.json is stale: run `chatmem openapi > docs/openapi.json`"
    )


def test_every_operation_documents_its_errors(service: TestClient) -> None:
    paths = service.get("/openapi.json").json()["paths"]
    for path, methods in paths.items():
        for method, operation in methods.items():
            if path.startswith("/v1/"):
                assert "400" in operation["responses"], f"{method.upper()} {path}"


@pytest.mark.slow
def test_no_request_makes_a_server_error(service: TestClient) -> None:
    """Every operation of the spec, fed schemathesis' generated requests (valid and not),
    answers below 500. Data routes run as the anonymous tenant, admin routes with the admin
    key; chat requests reach the scripted upstream."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", service.app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 20
    failures: list[str] = []
    for operation in operations:
        strategy = operation.as_strategy(GenerationMode.POSITIVE) | operation.as_strategy(
            GenerationMode.NEGATIVE
        )

        @given(case=strategy)
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def answers_below_500(case: schemathesis.Case) -> None:
            admin = case.path.startswith("/v1/admin")
            response = case.call(
                headers={"Authorization": f"Bearer {ADMIN_KEY}"} if admin else None
            )
            if response.status_code >= 500:
                failures.append(
                    f"{case.method} {case.formatted_path} {response.status_code}: "
                    f"{response.text[:300]}"
                )

        answers_below_500()
    assert not failures, "\n".join(failures[:20])
