"""Startup keeps the event loop free: the SDK is imported in a worker thread,
and what startup loaded is taken out of the collector's full passes."""

from __future__ import annotations

import gc
import importlib
import threading

import pytest

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
    assert service.PROVIDER_MODULE == "bot.llm.warm_up"


def test_startup_objects_leave_the_collectors_full_passes() -> None:
    before = gc.get_freeze_count()
    kept = [object() for _ in range(10)]
    try:
        settle_heap(collect=False)
        assert gc.get_freeze_count() >= before + len(kept)
    finally:
        gc.unfreeze()  # the test process goes on collecting as before


@pytest.mark.slow  # allocates and collects a burst of objects
def test_a_burst_of_live_objects_runs_no_pass_over_the_older_generations() -> None:
    """Objects a burst of messages keeps alive while their model calls are out
    make the collector pass over the young generation only, not the older
    ones (each such pass a stall of the event loop that grows with the heap)."""
    saved = gc.get_threshold()
    passes: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    try:
        settle_heap(collect=True)
        gc.callbacks.append(seen)
        alive = [[i] for i in range(200_000)]  # a burst's messages, alive meanwhile
        gc.callbacks.remove(seen)
    finally:
        if seen in gc.callbacks:
            gc.callbacks.remove(seen)
        gc.set_threshold(*saved)
        gc.unfreeze()
    assert len(alive) == 200_000
    assert passes and set(passes) == {0}, passes
