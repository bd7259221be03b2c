"""Fixtures shared by the Telegram tests: each transport library, and a `Rig`
(the real App and adapter against a fake Bot API on a controllable clock)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.adapters.telegram.rig import LIBRARIES, Rig
from tests.fakes.telegram import FakeTelegram
from tests.fakes.telegram_updates import FakeClock


@pytest.fixture(params=LIBRARIES)
def library(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def rig(database, fake_anthropic) -> AsyncIterator[Rig]:  # type: ignore[no-untyped-def]
    clock = FakeClock()
    async with FakeTelegram(clock=clock.now) as telegram:
        rig = Rig(database, fake_anthropic, telegram, clock)
        try:
            yield rig
        finally:
            await rig.close()
