"""The dashboard's small parts on their own: session cookies (signing,
expiry, constant-time checks of any input), CSRF tokens, the login lockout
per source (and its bounded memory), client addresses (X-Forwarded-For only
behind a trusted proxy), and the SVG bar chart (escaping, empty data)."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from bot.web.admin.auth import Credential, Signer, same
from bot.web.admin.charts import bar_chart, short
from bot.web.admin.csrf import csrf_ok, csrf_token
from bot.web.admin.lockout import LOGIN_FAILURES, LOGIN_WINDOW_S, Lockout, source_of
from bot.web.clients import client_address, forwarded_https, ip_text


def test_sessions_are_signed_and_expire() -> None:
    signer = Signer("token-one")
    value = signer.new_session()
    session = signer.session(value)
    assert session is not None and "token-one" not in value
    assert value.startswith(f"{session.expiry}.{session.nonce}.")
    assert Signer("token-two").session(value) is None  # a new token ends every session
    assert signer.session(signer.new_session()) != session  # each login its own
    expired = Signer("token-one", session_seconds=-1)
    assert expired.session(expired.new_session()) is None
    for garbage in ("", "a.b", "a.b.c.d", "x.y.z", "\x00.\x00.\x00", "é.ü.ß", "1.2." + "f" * 64):
        assert signer.session(garbage) is None


def nonce(signer: Signer) -> str:
    session = signer.session(signer.new_session())
    assert session is not None
    return session.nonce


def test_csrf_tokens_belong_to_one_session() -> None:
    gate = Signer("token-one")
    a = Credential("session", nonce(gate))
    b = Credential("session", nonce(gate))
    token = csrf_token(gate, a)
    assert csrf_ok(gate, a, token)
    assert not csrf_ok(gate, b, token)
    assert not csrf_ok(gate, a, None) and not csrf_ok(gate, a, "") and not csrf_ok(gate, a, "é")
    assert not csrf_ok(gate, Credential("session", ""), csrf_token(gate, Credential("session")))
    assert csrf_ok(gate, Credential("bearer"), None)  # no ambient authority


def test_same_compares_any_text() -> None:
    assert same("abc", "abc") and not same("abc", "abd") and not same("é", "e")
    with pytest.raises(ValueError):
        Signer("")


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


def test_the_login_form_is_throttled_per_source_after_many_wrong_tokens() -> None:
    now = [1000.0]
    lockout = Lockout(clock=lambda: now[0])
    for _ in range(LOGIN_FAILURES - 1):
        lockout.failed("203.0.113.7")
    assert not lockout.blocked("203.0.113.7")
    lockout.failed("203.0.113.7")
    assert lockout.blocked("203.0.113.7")
    assert not lockout.blocked("203.0.113.8") and not lockout.blocked("?")  # others log in
    now[0] += LOGIN_WINDOW_S - 1
    assert lockout.blocked("203.0.113.7")
    now[0] += 1  # the oldest failures age out
    assert not lockout.blocked("203.0.113.7")
    assert len(lockout) == 0  # and are forgotten


def test_the_right_token_forgives_a_sources_earlier_mistakes() -> None:
    lockout = Lockout(clock=lambda: 5.0)
    for _ in range(LOGIN_FAILURES - 1):
        lockout.failed("198.51.100.1")
    lockout.succeeded("198.51.100.1")
    lockout.failed("198.51.100.1")
    assert not lockout.blocked("198.51.100.1")


def test_an_ipv6_host_counts_as_its_slash_64() -> None:
    assert source_of("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert source_of("::ffff:203.0.113.9") == "203.0.113.9"
    assert source_of("203.0.113.9") == "203.0.113.9"
    assert source_of("?") == "?"
    lockout = Lockout(clock=lambda: 5.0)
    for k in range(LOGIN_FAILURES):  # a fresh address in the same /64 for every guess
        lockout.failed(f"2001:db8:1:2::{k + 1:x}")
    assert lockout.blocked("2001:db8:1:2:ffff::77")
    assert not lockout.blocked("2001:db8:1:3::1")


def test_the_lockout_table_is_bounded() -> None:
    now = [0.0]
    lockout = Lockout(clock=lambda: now[0], max_sources=100)
    for _ in range(LOGIN_FAILURES):
        lockout.failed("192.0.2.1")  # locked, the first to fail
    for k in range(1000):  # a crowd of addresses, one wrong token each
        now[0] += 0.01
        lockout.failed(f"10.{k // 256}.{k % 256}.1")
    assert len(lockout) == 100
    assert lockout.blocked("192.0.2.1") is False  # the least recent went first
    assert not lockout.blocked("10.3.231.1")  # one failure: counted, not locked
    for _ in range(LOGIN_FAILURES - 1):
        lockout.failed("10.3.231.1")  # the latest of the crowd is still counted
    assert lockout.blocked("10.3.231.1") and len(lockout) == 100
    now[0] += LOGIN_WINDOW_S
    lockout.failed("192.0.2.200")  # the aged-out ones make room
    assert len(lockout) <= 100


def request(peer: str, *headers: tuple[str, str]) -> web.Request:
    return make_mocked_request(
        "POST",
        "/admin/login",
        headers=CIMultiDict(headers),
        transport=_Transport(peer),
    )


class _Transport:
    """The peer's address, as aiohttp reads it from the transport."""

    def __init__(self, peer: str) -> None:
        self._peer = peer

    def get_extra_info(self, name: str, default: object = None) -> object:
        return (self._peer, 40000) if name == "peername" else default


def test_x_forwarded_for_counts_only_behind_a_trusted_proxy() -> None:
    forged = request("198.51.100.4", ("X-Forwarded-For", "192.0.2.66"))
    assert client_address(forged, trust_proxy=False) == "198.51.100.4"
    assert client_address(forged, trust_proxy=True) == "192.0.2.66"
    # The proxy appends what it saw: the right-most entry, over every header line.
    chain = request(
        "10.0.0.2",
        ("X-Forwarded-For", "192.0.2.66, 192.0.2.67"),
        ("X-Forwarded-For", "203.0.113.50"),
    )
    assert client_address(chain, trust_proxy=True) == "203.0.113.50"
    for garbage in ("", "unknown", "192.0.2.66, not-an-ip", "1.2.3.4.5", "x" * 5000):
        bad = request("10.0.0.2", ("X-Forwarded-For", garbage))
        assert client_address(bad, trust_proxy=True) == "10.0.0.2"
    assert client_address(request("10.0.0.2"), trust_proxy=True) == "10.0.0.2"
    assert [ip_text(v) for v in ("[2001:DB8::1]:443", "203.0.113.7:51234", "::ffff:1.2.3.4")] == [
        "2001:db8::1",
        "203.0.113.7",
        "1.2.3.4",
    ]


def test_the_forwarded_scheme() -> None:
    assert forwarded_https(request("10.0.0.2")) is None
    assert forwarded_https(request("10.0.0.2", ("X-Forwarded-Proto", "HTTPS"))) is True
    assert forwarded_https(request("10.0.0.2", ("X-Forwarded-Proto", "https, http"))) is False
