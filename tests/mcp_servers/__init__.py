"""Real MCP servers for the tests (`toolbox.py`, written with the `mcp` SDK's
server API), and how a test runs them: as a stdio subprocess the service
starts itself (`stdio_config`), or as a streamable-HTTP server on 127.0.0.1
that the test starts, kills and restarts (`HttpToolbox`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.paths import REPO_ROOT

TOOLBOX = REPO_ROOT / "tests" / "mcp_servers" / "toolbox.py"
START_TIMEOUT_S = 30.0


def toolbox_args(log: Path | None = None, *extra: str) -> list[str]:
    args = [str(TOOLBOX)]
    if log is not None:
        args += ["--log", str(log)]
    return [*args, *extra]


def stdio_config(log: Path | None = None, *extra: str, **policy: Any) -> dict[str, Any]:
    """`[mcp.servers.NAME]` for the toolbox as a stdio server."""
    return {"command": sys.executable, "args": toolbox_args(log, *extra), **policy}


def calls(log: Path) -> list[dict[str, Any]]:
    """What the toolbox recorded: each call (and each cancellation), in order."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@dataclass
class HttpToolbox:
    """The toolbox as a streamable-HTTP server on 127.0.0.1:`port`, in a subprocess."""

    port: int
    log: Path | None = None
    extra: tuple[str, ...] = ()
    proc: asyncio.subprocess.Process | None = None
    starts: int = 0
    stderr: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def config(self, **policy: Any) -> dict[str, Any]:
        return {"url": self.url, **policy}

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *toolbox_args(self.log, "--http", str(self.port), *self.extra),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        self.starts += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT_S
        while not _listening(self.port):
            if self.proc.returncode is not None:
                raise AssertionError(f"the toolbox exited ({self.proc.returncode})")
            if loop.time() > deadline:
                raise AssertionError("the toolbox did not listen")
            await asyncio.sleep(0.05)

    async def kill(self) -> None:
        """SIGKILL, as a crash."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()

    async def wait_exited(self) -> None:
        """The server exited by itself (its `die` tool)."""
        if self.proc is not None:
            await asyncio.wait_for(self.proc.wait(), START_TIMEOUT_S)
            self.proc = None

    async def __aenter__(self) -> HttpToolbox:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.returncode is None:
            proc.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 10)
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0
