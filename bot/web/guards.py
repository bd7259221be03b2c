"""Bad input is the sender's problem: a webhook answers it with a 4xx, never a 5xx,
and the process and `/healthz` carry on.

`input_guard` runs before every route: a body over `max_body` bytes gets 413; a
JSON body that is not UTF-8, not JSON or nested deeper than `MAX_DEPTH` gets 400,
before any handler (or signature check) parses it; a handler that trips over the
payload's shape (ValueError, TypeError, KeyError, RecursionError, ...) gets 400 too.
Each rejection is one WARNING line naming the route, the status and the reason,
never the body or its headers (which carry signatures and tokens).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

log = logging.getLogger("switchboard.web")

MAX_DEPTH = 64
"""No platform sends JSON nested deeper than this; deeper is an attack."""

BAD_INPUT = (ValueError, TypeError, KeyError, IndexError, RecursionError, UnicodeError)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_problem(body: bytes) -> str | None:
    """Why `body` is not acceptable JSON, or None when it is."""
    try:
        value = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        return "body is not UTF-8"
    except RecursionError:
        return "JSON nested too deeply"
    except ValueError:
        return "body is not JSON"
    if _depth(value) > MAX_DEPTH:
        return "JSON nested too deeply"
    return None


def _depth(value: object) -> int:
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item)
    return deepest


def _reject(request: web.Request, status: int, reason: str) -> web.Response:
    log.warning(
        "web.rejected method=%s path=%s status=%d reason=%r remote=%s",
        request.method,
        request.path,
        status,
        reason,
        request.remote,
    )
    return web.json_response({"error": reason}, status=status)


def input_guard(max_body: int) -> Middleware:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in ("POST", "PUT", "PATCH"):
            length = request.content_length
            if length is not None and length > max_body:
                return _reject(request, 413, f"body over {max_body} bytes")
            try:
                body = await request.read()  # kept: the handler reads the same bytes
            except web.HTTPRequestEntityTooLarge:
                return _reject(request, 413, f"body over {max_body} bytes")
            if request.content_type == "application/json" and (problem := json_problem(body)):
                return _reject(request, 400, problem)
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except BAD_INPUT as exc:
            return _reject(request, 400, f"unreadable request ({type(exc).__name__})")

    return guard
