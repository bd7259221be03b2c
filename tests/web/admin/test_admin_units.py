"""The dashboard's small parts on their own: the session gate (signing,
expiry, revocation, constant-time checks of any input), CSRF tokens, and the
SVG bar chart (escaping, empty data)."""

from __future__ import annotations

import pytest

from bot.web.admin.auth import LOGIN_FAILURES, LOGIN_WINDOW_S, Credential, Gate, same
from bot.web.admin.charts import bar_chart, short
from bot.web.admin.csrf import csrf_ok, csrf_token


def test_sessions_are_signed_expire_and_can_be_revoked() -> None:
    gate = Gate("token-one")
    value = gate.new_session()
    nonce = gate.session_nonce(value)
    assert nonce is not None and "token-one" not in value
    assert Gate("token-two").session_nonce(value) is None  # a new token ends every session
    gate.revoke(value)
    assert gate.session_nonce(value) is None
    assert gate.session_nonce(gate.new_session()) is not None  # others go on
    expired = Gate("token-one", session_seconds=-1)
    assert expired.session_nonce(expired.new_session()) is None
    for garbage in ("", "a.b", "a.b.c.d", "x.y.z", "\x00.\x00.\x00", "é.ü.ß", "1.2." + "f" * 64):
        assert gate.session_nonce(garbage) is None
        gate.revoke(garbage)  # harmless


def test_csrf_tokens_belong_to_one_session() -> None:
    gate = Gate("token-one")
    a = Credential("session", gate.session_nonce(gate.new_session()) or "")
    b = Credential("session", gate.session_nonce(gate.new_session()) or "")
    token = csrf_token(gate, a)
    assert csrf_ok(gate, a, token)
    assert not csrf_ok(gate, b, token)
    assert not csrf_ok(gate, a, None) and not csrf_ok(gate, a, "") and not csrf_ok(gate, a, "é")
    assert not csrf_ok(gate, Credential("session", ""), csrf_token(gate, Credential("session")))
    assert csrf_ok(gate, Credential("bearer"), None)  # no ambient authority


def test_same_compares_any_text() -> None:
    assert same("abc", "abc") and not same("abc", "abd") and not same("é", "e")
    with pytest.raises(ValueError):
        Gate("")


def test_bar_chart_escapes_and_handles_empty_data() -> None:
    svg = bar_chart('<b>"x"</b>', ["<i>", "b"], [0, 5])
    assert "<b>" not in svg and "<i>" not in svg and "&lt;b&gt;" in svg
    assert svg.count('<rect class="bar"') == 2
    empty = bar_chart("nothing", [], [])
    assert empty.startswith("<svg") and "<rect" not in empty
    zeros = bar_chart("zeros", ["a"], [0])
    assert 'height="0.0"' in zeros
    with pytest.raises(ValueError):
        bar_chart("mismatch", ["a"], [])
    assert [short(v) for v in (12, 12_300, 4_500_000, 2_000_000_000)] == [
        "12",
        "12.3k",
        "4.5M",
        "2G",
    ]


def test_the_login_form_is_throttled_after_many_wrong_tokens() -> None:
    now = [1000.0]
    gate = Gate("token-one", clock=lambda: now[0])
    for _ in range(LOGIN_FAILURES - 1):
        gate.login_failed()
    assert not gate.login_blocked()
    gate.login_failed()
    assert gate.login_blocked()
    now[0] += LOGIN_WINDOW_S - 1
    assert gate.login_blocked()
    now[0] += 1  # the oldest failures age out
    assert not gate.login_blocked()
