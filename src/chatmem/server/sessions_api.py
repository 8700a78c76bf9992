"""Placeholder router (filled in by its own module's work)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
