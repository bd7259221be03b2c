"""A database failure that passes, met by work that is tried again (the
recovery sweep, a leader's check, a claim the sweep will make), is logged at
WARNING with its cause; ERROR stays for what an operator must look at. (The
soak counts ERROR lines with no failure recorded for them: a sweep that met
"database is locked" under load was one.)"""

from __future__ import annotations

import logging
import sqlite3

import pytest
from sqlalchemy.exc import OperationalError

from bot.pipeline.recovery import Swept
from bot.store.transient import log_failure
from tests.waiting import wait_until

LOCKED = OperationalError("BEGIN IMMEDIATE", {}, sqlite3.OperationalError("database is locked"))


def test_a_failure_that_passes_is_a_warning_with_its_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("switchboard.test")
    with caplog.at_level(logging.INFO, logger="switchboard.test"):
        log_failure(log, LOCKED, "work.failed item=%s", 7)
        log_failure(log, ValueError("a bug"), "work.failed item=%s", 8)
    transient, other = caplog.records
    assert transient.levelno == logging.WARNING and transient.exc_info is None
    assert "work.failed item=7" in transient.getMessage()
    assert "database is locked" in transient.getMessage()
    assert other.levelno == logging.ERROR and other.exc_info is not None


async def test_a_sweep_that_meets_a_locked_database_warns_and_sweeps_again(
    make_app, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    app = await make_app(inbox={"sweep_seconds": 0.05})
    housekeeper = app.housekeeper
    tries: list[int] = []

    async def sweep() -> Swept:
        tries.append(1)
        if len(tries) == 1:
            raise LOCKED
        return Swept()

    housekeeper.sweep = sweep  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="switchboard.recovery"):
        housekeeper.start(["console"])
        await wait_until(lambda: len(tries) >= 2)
        await housekeeper.stop()
    failed = [r for r in caplog.records if "recovery.sweep_failed" in r.getMessage()]
    assert [r.levelname for r in failed] == ["WARNING"]
    assert "database is locked" in failed[0].getMessage()
