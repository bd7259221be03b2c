"""A real MCP server for the tests, written with the `mcp` SDK's low-level
server API: run as a stdio subprocess (``python -m tests.mcp_servers.toolbox``)
or as a streamable-HTTP server on 127.0.0.1 (``--http PORT``).

Its tools:

- ``echo`` (readOnlyHint) → "echo: <text>"
- ``create_ticket`` (no annotations: external) → "created ticket #N: <title>"
- ``read_page`` (readOnlyHint) → a page whose text is `--page` (e.g. an injection)
- ``fail`` → a result flagged isError
- ``hang`` → never answers; a cancellation at the server is recorded
- ``die`` → the server process exits in the middle of the call
- ``picture`` → text, a PNG image and structured content
- ``add_tool`` → adds ``late_tool`` and sends notifications/tools/list_changed
- ``environment`` (readOnlyHint) → what the process sees: environment, cwd,
  argv, open file descriptors, session and process group
- ``babble`` → writes a line that is not JSON-RPC to stdout, then answers
- ``shout`` → writes 100 lines to stderr, then answers
- ``big`` (readOnlyHint) → 20,000 characters of text
- ``--tools N`` more: ``tool_000``… each about one of a few topics
- ``--bad-schemas``: ``bad_schema`` (not valid JSON Schema) and ``huge_schema`` (> 8 KB)

Every call (and a cancellation of one) is appended to ``--log FILE`` as a JSON
line, so a test sees exactly what the server did and how often.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server

PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360f8cf00000301010018dd8db40000000049454e44ae426082"
    )
).decode()
TOPICS = (
    ("weather", "Get the weather forecast for a city"),
    ("invoice", "Create an invoice for a customer account"),
    ("calendar", "List the calendar events of a day"),
    ("deploy", "Deploy a service to the staging environment"),
    ("translate", "Translate a text into another language"),
    ("stock", "Look up the stock level of a product in the warehouse"),
    ("payroll", "Compute the payroll of an employee for a month"),
    ("backup", "Start a backup of a database"),
)
INHERITED_FDS: list[int] = []
"""The file descriptors open when `main` started, before the server opened
any: what the process was given (and the one the listing itself opens)."""
OBJECT = {"type": "object", "properties": {"text": {"type": "string"}}}
READ = types.ToolAnnotations(read_only_hint=True)


def topic_tool(index: int) -> types.Tool:
    topic, text = TOPICS[index % len(TOPICS)]
    return types.Tool(
        name=f"tool_{index:03d}",
        description=f"{text} (variant {index}, {topic}).",
        input_schema={"type": "object", "properties": {"query": {"type": "string"}}},
        annotations=READ if index % 2 == 0 else None,
    )


class Toolbox:
    def __init__(self, log: Path | None, page: str, extra: int, bad_schemas: bool) -> None:
        self.log = log
        self.page = page
        self.tickets = 0
        self.tools = [
            types.Tool(name="echo", description="Echo the text back.", input_schema=OBJECT,
                       annotations=READ),
            types.Tool(
                name="create_ticket",
                description="Create a ticket in the team's tracker.",
                input_schema={
                    "type": "object",
                    "properties": {"title": {"type": "string"}},
                    "required": ["title"],
                },
            ),
            types.Tool(name="read_page", description="Read the team's wiki page.",
                       input_schema=OBJECT, annotations=READ),
            types.Tool(name="fail", description="Always fails.", input_schema=OBJECT),
            types.Tool(name="hang", description="Never answers.", input_schema=OBJECT),
            types.Tool(name="die", description="Exits mid-call.", input_schema=OBJECT),
            types.Tool(name="picture", description="A picture of the day.", input_schema=OBJECT,
                       annotations=READ),
            types.Tool(name="add_tool", description="Adds a tool.", input_schema=OBJECT),
            types.Tool(name="environment", description="What this process sees.",
                       input_schema=OBJECT, annotations=READ),
            types.Tool(name="babble", description="Garbage on stdout.", input_schema=OBJECT),
            types.Tool(name="shout", description="Noise on stderr.", input_schema=OBJECT),
            types.Tool(name="big", description="A long report.", input_schema=OBJECT,
                       annotations=READ),
            *(topic_tool(i) for i in range(extra)),
        ]  # fmt: skip
        if bad_schemas:
            self.tools.append(
                types.Tool(
                    name="bad_schema",
                    description="Bad.",
                    input_schema={"type": "object", "properties": {"x": {"type": "nonsense"}}},
                )
            )
            huge = {f"field_{i}": {"type": "string", "description": "x" * 100} for i in range(90)}
            self.tools.append(
                types.Tool(
                    name="huge_schema",
                    description="Huge.",
                    input_schema={"type": "object", "properties": huge},
                )
            )

    def record(self, **entry: Any) -> None:
        if self.log is not None:
            with self.log.open("a", encoding="utf-8") as file:
                file.write(json.dumps(entry) + "\n")

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self.tools))

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = params.arguments or {}
        self.record(tool=params.name, args=args, pid=os.getpid())
        name = params.name
        if name == "echo":
            return text(f"echo: {args.get('text', '')}")
        if name == "create_ticket":
            self.tickets += 1
            return text(f"created ticket #{self.tickets}: {args.get('title', '')}")
        if name == "read_page":
            return text(self.page)
        if name == "fail":
            return types.CallToolResult(
                content=[types.TextContent(text="the tracker refused: project TEAM is archived")],
                is_error=True,
            )
        if name == "hang":
            try:
                await anyio.sleep_forever()
            finally:
                self.record(cancelled="hang")
        if name == "die":
            os._exit(3)
        if name == "picture":
            return types.CallToolResult(
                content=[
                    types.TextContent(text="Here is the picture."),
                    types.ImageContent(data=PNG, mime_type="image/png"),
                ],
                structured_content={"width": 1, "height": 1},
            )
        if name == "add_tool":
            self.tools.append(
                types.Tool(name="late_tool", description="Added later.", input_schema=OBJECT,
                           annotations=READ)
            )  # fmt: skip
            await ctx.session.send_tool_list_changed()
            return text("added late_tool")
        if name == "environment":
            return text(json.dumps(sees()))
        if name == "babble":
            os.write(1, b"this is not JSON-RPC\n")
            return text("babbled")
        if name == "big":
            return text("".join(f"line {i:05d} of the report\n" for i in range(800)))
        if name == "shout":
            for i in range(100):
                print(f"noise {i}", file=sys.stderr, flush=True)
            return text("shouted")
        if name == "late_tool" or name.startswith("tool_"):
            return text(f"{name} answered {args.get('query') or args.get('text') or ''}".strip())
        return types.CallToolResult(content=[types.TextContent(text=f"no tool {name}")],
                                    is_error=True)  # fmt: skip


def text(value: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=value)])


def sees() -> dict[str, Any]:
    """What this process can see of the one that started it."""
    return {
        "environ": dict(os.environ),
        "cwd": os.getcwd(),
        "argv": sys.argv,
        "fds": INHERITED_FDS,
        "pid": os.getpid(),
        "sid": os.getsid(0),
        "pgid": os.getpgid(0),
        "ppid": os.getppid(),
    }


def build(args: argparse.Namespace) -> Server[Any]:
    box = Toolbox(args.log, args.page, args.tools, args.bad_schemas)
    return Server("toolbox", on_list_tools=box.list_tools, on_call_tool=box.call_tool)


async def serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    print("toolbox: serving on stdio", file=sys.stderr, flush=True)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve_http(server: Server[Any], port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    INHERITED_FDS.extend(sorted(int(fd) for fd in os.listdir("/proc/self/fd")))
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, help="serve on 127.0.0.1:PORT")
    parser.add_argument("--log", type=Path, default=None)
    parser.add_argument("--page", default="Welcome to the wiki.")
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--bad-schemas", action="store_true")
    args = parser.parse_args()
    server = build(args)
    if args.http is not None:
        serve_http(server, args.http)
    else:
        anyio.run(serve_stdio, server)


if __name__ == "__main__":
    main()
