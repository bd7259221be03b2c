"""The real service as a subprocess (`python -m bot run`), for tests that kill it.

`Service` starts `switchboard run` with Slack in HTTP mode against a `FakeSlack`
and the model at a `FakeAnthropic`, waits for `/readyz` (every adapter started:
`/healthz` answers before they are), and can SIGKILL,
SIGTERM and restart it; its stderr is kept for the failure message and for
assertions on its logs. `SlackSender` plays Slack's side of the Events API:
signed deliveries, redelivered (with `X-Slack-Retry-Num`) until answered 200,
as Slack does while a service is down or answers an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import socket
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.conftest import TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack, signed_headers
from tests.paths import REPO_ROOT

START_TIMEOUT_S = 60.0


def _ports() -> Iterator[int]:
    """Ports for `free_port`, endlessly: outside the kernel's ephemeral range
    (where every outgoing connection of the machine takes its local port), and
    this test worker's share of them (pytest-xdist: workers never pick the same
    port), from a random start (the previous session's may linger)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        low, high = (int(part) for part in text.split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    ports = range(20000, low) if low - 20000 >= 2000 else range(high + 1, 65536)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    mine = ports[index % count :: count]
    start = random.randrange(len(mine))
    return itertools.cycle([*mine[start:], *mine[:start]])


_NEXT_PORTS = _ports()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, for a server started later
    (a subprocess): one the kernel never gives an outgoing connection, so
    nothing takes it in the meantime (a port from `bind(0)` is, and under a
    parallel run one did take it before the service bound it)."""
    for _ in range(1000):
        port = next(_NEXT_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # a server of the machine's, or still in TIME_WAIT
                continue
            return port
    raise RuntimeError("no free port on 127.0.0.1 outside the ephemeral range")


def service_env(
    database: Database, model: FakeAnthropic, slack: FakeSlack, port: int, **extra: str
) -> dict[str, str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "ANTHROPIC_API_KEY": TEST_API_KEY,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SWITCHBOARD__DATABASE__URL": database.url,
        "SWITCHBOARD__LLM__BASE_URL": model.base_url,
        "SWITCHBOARD__LLM__MAX_RETRIES": "0",
        "SWITCHBOARD__SLACK__ENABLED": "true",
        "SWITCHBOARD__SLACK__MODE": "http",
        "SWITCHBOARD__SLACK__API_BASE_URL": slack.api_url,
        "SWITCHBOARD__SERVER__PORT": str(port),
        "SWITCHBOARD__BUDGETS__GUEST": "unlimited",
        "SWITCHBOARD__INBOX__LEASE_SECONDS": "3",
        "SWITCHBOARD__INBOX__SWEEP_SECONDS": "0.5",
        "SWITCHBOARD__LOGGING__LEVEL": "INFO",
    }
    if database.schema:
        env["SWITCHBOARD__DATABASE__SCHEMA_NAME"] = database.schema
    env.update(extra)
    return env


@dataclass
class Service:
    env: dict[str, str]
    cwd: Path
    port: int
    proc: asyncio.subprocess.Process | None = None
    module: str = "bot"
    """What `python -m` runs (`bot run`, or another program speaking HTTP on `port`)."""
    logs: list[str] = field(default_factory=list)
    """stderr lines of every run, in order."""
    start_timeout: float = START_TIMEOUT_S
    """How long `start` waits for `ready_path`."""
    ready_path: str = "/readyz"
    """What answers 200 once the program is ready (the service: its adapters too)."""
    _reader: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            *((self.module, "run") if self.module == "bot" else (self.module,)),
            env={**self.env, "PYTHONPATH": str(REPO_ROOT)},
            cwd=self.cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self._reader = asyncio.create_task(self._read(self.proc))
        await self._wait_ready()

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        async for line in proc.stderr:
            self.logs.append(line.decode(errors="replace").rstrip())

    async def _wait_ready(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.start_timeout
        async with aiohttp.ClientSession() as http:
            while True:
                if self.proc is not None and self.proc.returncode is not None:
                    await self._drain()
                    raise AssertionError("the service exited:\n" + self.log_text)
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(self.url + self.ready_path) as response:
                        if response.status == 200:
                            return
                if loop.time() > deadline:
                    raise AssertionError(
                        f"the service did not get ready ({self.ready_path}):\n" + self.log_text
                    )
                await asyncio.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: no drain, no cleanup, like a crash."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)

    async def stop(self, sig: int = signal.SIGTERM, grace: float = 60.0) -> int:
        proc = self.proc
        if proc is None:
            return 0
        if proc.returncode is None:
            proc.send_signal(sig)
        try:
            code = await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            proc.kill()
            code = await proc.wait()
        await self._drain()
        self.proc = None
        return code

    async def _drain(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader, 5)
            self._reader = None

    @property
    def log_text(self) -> str:
        return "\n".join(self.logs[-200:])


@dataclass
class SlackSender:
    """Slack's side of the Events API: signed deliveries, retried until 200."""

    http: aiohttp.ClientSession
    urls: list[str]
    """Where to deliver (one per instance); deliveries rotate over them."""
    delivered: dict[str, int] = field(default_factory=dict)
    """event_id → attempts it took."""
    _next: int = 0

    async def deliver(self, body: Mapping[str, Any], *, within: float = 90.0) -> None:
        raw = json.dumps(body)
        event_id = str(body.get("event_id"))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        attempt = 0
        while True:
            url = self.urls[self._next % len(self.urls)]
            self._next += 1
            headers = {"Content-Type": "application/json", **signed_headers(raw)}
            if attempt:
                headers["X-Slack-Retry-Num"] = str(attempt)
                headers["X-Slack-Retry-Reason"] = "http_error"
            attempt += 1
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                timeout = aiohttp.ClientTimeout(total=3.0)  # Slack's own deadline
                async with self.http.post(
                    url + "/slack/events", data=raw.encode(), headers=headers, timeout=timeout
                ) as response:
                    if response.status == 200:
                        self.delivered[event_id] = attempt
                        return
            if loop.time() > deadline:
                raise AssertionError(f"event {event_id} was never acknowledged")
            await asyncio.sleep(0.2)
