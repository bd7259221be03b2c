"""What the model calls an MCP tool, and which definitions it may be sent.

A tool is offered as ``mcp__<server>__<tool>``: characters outside
``[A-Za-z0-9_-]`` replaced by ``_``, at most 64 characters (a longer name is
cut and ends with a hash of the whole, so it stays unique), unique among the
server's tools. Its input schema must be a JSON Schema object (``type:
object``) the model's API accepts, of at most 8 KB: a tool whose schema is
not is left out (the API would refuse every request carrying it).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping
from typing import Any

MAX_NAME = 64
MAX_SCHEMA_BYTES = 8 * 1024
PREFIX = "mcp__"
_OUTSIDE = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str, taken: Collection[str] = ()) -> str:
    """The name the model sees for `server`'s tool `tool`, not in `taken`."""
    whole = f"{PREFIX}{_OUTSIDE.sub('_', server)}__{_OUTSIDE.sub('_', tool)}"
    name = whole
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(whole.encode()).hexdigest()[:8]
        name = f"{whole[: MAX_NAME - 9]}_{digest}"
    n = 2
    while name in taken:
        suffix = f"_{n}"
        name = f"{name[: MAX_NAME - len(suffix)]}{suffix}"
        n += 1
    return name


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why `schema` cannot be sent as a tool's input schema, or None."""
    try:
        size = len(json.dumps(schema, ensure_ascii=False).encode())
    except (TypeError, ValueError):
        return "its input schema is not JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"its input schema is {size:,} bytes (at most {MAX_SCHEMA_BYTES:,})"
    if schema.get("type") != "object":
        return 'its input schema is not an object schema (type: "object")'
    from jsonschema import SchemaError
    from jsonschema.validators import Draft202012Validator

    try:
        Draft202012Validator.check_schema(dict(schema))
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "(top)"
        return f"its input schema is not valid JSON Schema at {where}: {exc.message[:120]}"
    return None
