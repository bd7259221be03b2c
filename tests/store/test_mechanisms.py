"""The fast path's mechanisms are turned off by name for the mechanisms
benchmark (`SWITCHBOARD_FAST_PATH_OFF`); a name that is not one is refused,
not ignored (a benchmark would measure nothing off)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.store import mechanisms


@pytest.fixture
def read_again() -> Iterator[None]:
    mechanisms._off.cache_clear()
    yield
    mechanisms._off.cache_clear()


def test_the_named_mechanisms_are_off_and_only_they(
    monkeypatch: pytest.MonkeyPatch, read_again: None
) -> None:
    monkeypatch.setenv(mechanisms.ENV, "plans, kept")
    assert [name for name in mechanisms.MECHANISMS if mechanisms.off(name)] == ["plans", "kept"]


def test_none_is_off_by_default(monkeypatch: pytest.MonkeyPatch, read_again: None) -> None:
    monkeypatch.delenv(mechanisms.ENV, raising=False)
    assert not any(mechanisms.off(name) for name in mechanisms.MECHANISMS)


def test_a_name_that_is_no_mechanism_is_refused(
    monkeypatch: pytest.MonkeyPatch, read_again: None
) -> None:
    monkeypatch.setenv(mechanisms.ENV, "plans,group_comit")
    with pytest.raises(ValueError, match="group_comit"):
        mechanisms.off("plans")
