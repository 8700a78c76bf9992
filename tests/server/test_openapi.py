"""The OpenAPI spec: served, committed and true; schemathesis finds no 5xx on any route."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from chatmem.server import ServiceConfig, create_app

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


@pytest.fixture
def api_schema(service: TestClient) -> schemathesis.schemas.BaseSchema:
    return schemathesis.openapi.from_asgi("/openapi.json", service.app)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_makes_a_server_error(case: schemathesis.Case) -> None:
    case.call_and_validate(checks=[not_a_server_error])
