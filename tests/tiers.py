"""The test tiers (a pytest plugin, loaded by tests/conftest.py).

Markers (registered in pyproject.toml):

- `e2e`: starts the service itself as a subprocess (`python -m bot …`, the
  `switchboard` script, `tests.service_rig.Service`, `tests.terminal.Terminal`).
- `slow`: in-process, but seconds of work (or of waiting) each.
- `perf`: measures speed (`make bench`'s code under test).

`make test-fast` runs what is none of these; `make test` runs everything.

Tests fall into their tier by rule: a test that uses a fixture decorated with
`starts_the_service` is marked `e2e` at collection; and a test that starts the
service without the `e2e` marker fails, saying so (so a new test cannot slip
an end-to-end run into the fast tier).
"""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

E2E, SLOW, PERF = "e2e", "slow", "perf"
FAST = f"not {E2E} and not {SLOW} and not {PERF}"
"""`make test-fast`'s selection."""
E2E_TIMEOUT_S = 600.0
"""pytest-timeout's hang guard for an `e2e` test at least: a subprocess's start
and every CLI call take many times longer on a busy machine."""

SERVICE_MODULES = ("bot", "bot.cli", "bot.__main__")
"""What `python -m …` runs when it runs the service (or its CLI)."""
SERVICE_SCRIPT = "switchboard"

F = TypeVar("F", bound=Callable[..., Any])
_TAG = "__starts_the_service__"


def starts_the_service(fixture: F) -> F:
    """Tag a fixture (below `@pytest.fixture`) that starts the service as a
    subprocess: every test using it, directly or through other fixtures, is
    marked `e2e`."""
    setattr(fixture, _TAG, True)
    return fixture


class UnmarkedEndToEnd(AssertionError):
    """A test not marked `e2e` started the service as a subprocess."""


def launches_the_service(args: Any) -> bool:
    """Whether a subprocess's `args` (as `subprocess.Popen` takes them) run
    the service or its CLI."""
    if isinstance(args, (str, bytes, os.PathLike)):
        text = os.fsdecode(args)
        argv = shlex.split(text) if " " in text else [text]
    else:
        argv = [os.fsdecode(part) for part in args]
    if not argv:
        return False
    if Path(argv[0]).name == SERVICE_SCRIPT:
        return True
    return any(
        flag == "-m" and module in SERVICE_MODULES for flag, module in itertools.pairwise(argv)
    )


_running: list[pytest.Item] = []
"""The test being run (setup, call and teardown)."""


def _guarded(init: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: subprocess.Popen[Any], *given: Any, **kwargs: Any) -> None:
        args = given[0] if given else kwargs.get("args", ())
        if _running and launches_the_service(args) and not is_marked(_running[-1], E2E):
            test = _running[-1].nodeid
            raise UnmarkedEndToEnd(
                f"{test} starts the service as a subprocess ({args!r}) but is not marked "
                f"{E2E}: give its module `pytestmark = pytest.mark.{E2E}` (or the test "
                f"@pytest.mark.{E2E}), or tag the fixture that starts it with "
                "tests.tiers.starts_the_service"
            )
        init(self, *given, **kwargs)

    return __init__


def is_marked(item: pytest.Item, name: str) -> bool:
    return item.get_closest_marker(name) is not None


def uses_a_service_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    definitions: Sequence[Any] = [d for ds in info.name2fixturedefs.values() for d in ds]
    return any(getattr(d.func, _TAG, False) for d in definitions)


def pytest_configure(config: pytest.Config) -> None:
    if not getattr(subprocess.Popen.__init__, "_tiers_guard", False):
        guarded = _guarded(subprocess.Popen.__init__)
        guarded._tiers_guard = True  # type: ignore[attr-defined]
        subprocess.Popen.__init__ = guarded  # type: ignore[method-assign]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not is_marked(item, E2E) and uses_a_service_fixture(item):
            item.add_marker(E2E)
        if is_marked(item, E2E) and _timeout(item) < E2E_TIMEOUT_S:
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT_S))


def _timeout(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is None or not marker.args:
        return float(item.config.getini("timeout") or 0)
    return float(marker.args[0])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[Any]:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.remove(item)
