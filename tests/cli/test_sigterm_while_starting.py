"""A SIGTERM while `switchboard run` starts ends it cleanly (exit 0, its
start cut short and closed), never by the signal's default action: the soak
sent one just as /healthz answered and the process died of it (exit -15),
without a drain and without handing back what it had taken.

The service is held in its start on a Slack `auth.test` that the fake does
not answer (the signal handlers must be ours by then), and SIGTERMed there."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import pytest

from tests.conftest import TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.slack import FakeSlack
from tests.service_rig import Service, free_port, service_env

pytestmark = pytest.mark.timeout(240)


async def test_a_sigterm_during_start_up_is_a_clean_stop(
    database: Database, tmp_path: Path
) -> None:
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        answer = slack.hold("auth.test")
        service = Service(service_env(database, model, slack, port := free_port()), tmp_path, port)
        starting = asyncio.create_task(service.start())
        try:
            await slack.wait_for(lambda: slack.calls_to("auth.test") != [], within=180.0)
            assert service.proc is not None
            service.proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(service.proc.wait(), 60.0)
        finally:
            answer.set()
            with contextlib.suppress(AssertionError):  # it exited: never healthy
                await starting
            await service.stop()
    assert code == 0, service.log_text
    assert "shutdown requested while starting" in service.log_text
