"""FastAPI dependencies: the stream manager and the API token."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, HTTPException, Request, WebSocket

from .. import errors
from ..settings import Settings
from .manager import StreamManager


def get_manager(request: Request) -> StreamManager:
    return request.app.state.manager


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


Manager = Annotated[StreamManager, Depends(get_manager)]
AppSettings = Annotated[Settings, Depends(get_settings)]


def require_token(request: Request) -> None:
    """``Authorization: Bearer <token>`` on every /api request when a token is configured."""
    if not _token_ok(request.app.state.settings, _bearer(request.headers.get("authorization"))):
        raise HTTPException(
            401,
            {"code": errors.UNAUTHORIZED, "message": "missing or wrong API token (Authorization: Bearer ...)"},
            headers={"WWW-Authenticate": "Bearer"},
        )


def websocket_token_ok(ws: WebSocket) -> bool:
    """WebSockets may carry the token as ``?token=`` (browsers cannot set headers on them) or as a header."""
    given = ws.query_params.get("token") or _bearer(ws.headers.get("authorization"))
    return _token_ok(ws.app.state.settings, given)


def _bearer(header: str | None) -> str | None:
    if header and header.lower().startswith("bearer "):
        return header[7:].strip()
    return None


def _token_ok(settings: Settings, given: str | None) -> bool:
    if not settings.token:
        return True
    return given is not None and secrets.compare_digest(given.encode(), settings.token.encode())
