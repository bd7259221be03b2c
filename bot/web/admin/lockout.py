"""Slowing down guesses of the admin token through the login form, per source.

Wrong tokens are counted per client address (`bot.web.clients`): after
`LOGIN_FAILURES` of them within `LOGIN_WINDOW_S` that address's login form
refuses every attempt (429), the right token included, until the oldest of
them is that old. Another address is not affected, so an attacker's guesses
cannot shut the form for the operator coming from elsewhere. An IPv6 client
counts by its /64 network (one host usually holds a whole /64 and could
otherwise take a fresh address for every guess); an IPv4 client by its
address.

The counts are this process's own (several instances behind a load balancer
each allow an address its `LOGIN_FAILURES`): at 10 guesses per address and
instance every five minutes, a token of 24 or more random characters stays
out of reach. Memory is bounded: at most `MAX_SOURCES` sources are tracked, each with at
most `LOGIN_FAILURES` timestamps. When a new source fails while the table is
full, the sources whose failures have all aged out go first, then the one
that failed least recently (it starts from zero if it comes back; a WARNING
says so, once per window). Bearer requests are not counted or refused here.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable

log = logging.getLogger("switchboard.web")

LOGIN_FAILURES = 10
LOGIN_WINDOW_S = 300.0
MAX_SOURCES = 4096


def source_of(address: str) -> str:
    """The source `address`'s failures count for: the IPv4 address, the IPv6
    /64 network; anything else (no IP address) as it is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class Lockout:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        failures: int = LOGIN_FAILURES,
        window_s: float = LOGIN_WINDOW_S,
        max_sources: int = MAX_SOURCES,
    ) -> None:
        self._clock = clock
        self.failures = failures
        self.window_s = window_s
        self.max_sources = max_sources
        self._recent: OrderedDict[str, deque[float]] = OrderedDict()
        """source → its wrong tokens' times, oldest first; the sources in
        the order of their latest failure, least recent first."""
        self._evicted_warned_at: float | None = None

    def __len__(self) -> int:
        return len(self._recent)

    def blocked(self, address: str) -> bool:
        """Too many wrong tokens from `address` lately: refuse its login form."""
        source = source_of(address)
        times = self._recent.get(source)
        if times is None:
            return False
        self._age(times, self._clock())
        if not times:
            del self._recent[source]
            return False
        return len(times) >= self.failures

    def failed(self, address: str) -> None:
        """Count a wrong token from `address`."""
        source, now = source_of(address), self._clock()
        times = self._recent.get(source)
        if times is None:
            self._make_room(now)
            times = self._recent[source] = deque()
        else:
            self._recent.move_to_end(source)
            self._age(times, now)
        times.append(now)
        if len(times) == self.failures:
            log.warning(
                "admin.login_locked source=%s failures=%d window_s=%.0f "
                "(this source's login form answers 429 for now; others are not affected)",
                source,
                self.failures,
                self.window_s,
            )

    def succeeded(self, address: str) -> None:
        """The right token from `address`: its earlier mistakes are forgiven."""
        self._recent.pop(source_of(address), None)

    def _age(self, times: deque[float], now: float) -> None:
        while times and times[0] <= now - self.window_s:
            times.popleft()

    def _make_room(self, now: float) -> None:
        while len(self._recent) >= self.max_sources:
            source, times = next(iter(self._recent.items()))
            self._recent.popitem(last=False)
            self._age(times, now)
            if times and (
                self._evicted_warned_at is None or self._evicted_warned_at <= now - self.window_s
            ):
                self._evicted_warned_at = now
                log.warning(
                    "admin.login_sources_full sources=%d: wrong admin tokens from that many "
                    "addresses within %.0f s; the least recent (%s) is forgotten",
                    self.max_sources,
                    self.window_s,
                    source,
                )
