"""Startup keeps the event loop free: the SDK is imported in a worker thread,
and what startup loaded is taken out of the collector's full passes."""

from __future__ import annotations

import gc
import importlib
import threading

from bot.app import service
from bot.cli.run import settle_heap


async def test_the_sdk_is_imported_off_the_event_loop(monkeypatch) -> None:
    threads: list[threading.Thread] = []
    real = importlib.import_module

    def recording(name: str, package: str | None = None) -> object:
        threads.append(threading.current_thread())
        return real(name, package)

    monkeypatch.setattr(service.importlib, "import_module", recording)
    await service.import_provider()
    assert threads and all(t is not threading.main_thread() for t in threads)
    assert service.PROVIDER_MODULE == "bot.llm.anthropic"


def test_startup_objects_leave_the_collectors_full_passes() -> None:
    before = gc.get_freeze_count()
    kept = [object() for _ in range(10)]
    try:
        settle_heap(collect=False)
        assert gc.get_freeze_count() >= before + len(kept)
    finally:
        gc.unfreeze()  # the test process goes on collecting as before
