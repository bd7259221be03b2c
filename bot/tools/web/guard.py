"""The SSRF guard of `web_fetch`: which URLs and addresses a fetch may reach.

A fetch on a bot many people talk to is the classic way into the host's
private network (cloud metadata at 169.254.169.254, an admin page on
localhost, a database port), so every fetch is checked here, twice:

- the URL (`Guard.check_url`), before anything is sent: the scheme (http and
  https only), the port (`[web] ports`) and a host written as an address, in
  any of the numeric forms resolvers accept (``2130706433``, ``0x7f.1``,
  ``127.1``, ``0177.0.0.1``, ``[::ffff:127.0.0.1]``), which is normalised;
- the connection (`Guard.addresses`, called by the fetch's network backend
  for every connection it opens, redirects included): the host is resolved
  once, every address it resolves to is checked, and the connection goes to
  one of those addresses, never through a second lookup that a rebinding DNS
  could answer differently.

An address is refused when it is loopback, private (RFC 1918), link-local,
unique-local, shared (carrier-grade NAT), multicast, unspecified or
otherwise not public (``reserved``: documentation, benchmarking, 240/4, …),
or an IPv6 form carrying such an IPv4 address (IPv4-mapped, NAT64, 6to4).
`[web] allow_hosts` (``host:port`` pairs) is the one way past the address and
port checks. A refusal is a `Refused` whose message names the rule first:
``refused (rule=loopback): …``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from bot.errors import ToolFailed

IP = ipaddress.IPv4Address | ipaddress.IPv6Address

Rule = Literal[
    "scheme",
    "port",
    "loopback",
    "private",
    "link-local",
    "unique-local",
    "shared",
    "multicast",
    "unspecified",
    "reserved",
    "redirect",
    "timeout",
    "too_large",
    "content_type",
]
ADDRESS_RULES: frozenset[str] = frozenset(
    {
        "loopback",
        "private",
        "link-local",
        "unique-local",
        "shared",
        "multicast",
        "unspecified",
        "reserved",
    }
)

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""A host name and port → the addresses it resolves to (as text)."""


class Refused(ToolFailed):
    """A fetch the guard (or a cap) stopped: a deliberate refusal, never retried.
    `str()` names the rule first, before any URL."""

    def __init__(self, rule: Rule, why: str) -> None:
        super().__init__(f"refused (rule={rule}): {why}")
        self.rule: Rule = rule
        self.why = why


class BadURL(ToolFailed):
    """Not a URL that can be fetched (no host, an invalid address, …)."""


_SHARED = ipaddress.ip_network("100.64.0.0/10")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_PRIVATE_V4 = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)
_NAT64 = tuple(ipaddress.ip_network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48"))


def classify(ip: IP) -> Rule | None:
    """The rule `ip` breaks, or None for a public address."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.is_unspecified:
            return "unspecified"
        if ip.is_loopback:
            return "loopback"
        embedded = _embedded_v4(ip)
        if embedded is not None:
            return classify(embedded)
        if ip.is_link_local:
            return "link-local"
        if ip.is_multicast:
            return "multicast"
        if ip in _UNIQUE_LOCAL:
            return "unique-local"
        if ip.is_site_local:  # fec0::/10, deprecated: private all the same
            return "private"
        return None if ip.is_global else "reserved"
    if ip.is_unspecified or ip in _THIS_NETWORK:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip in _SHARED:
        return "shared"
    if any(ip in network for network in _PRIVATE_V4):
        return "private"
    return None if ip.is_global else "reserved"


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for, when it carries one: mapped
    (``::ffff:a.b.c.d``), compatible (``::a.b.c.d``, deprecated), NAT64
    (``64:ff9b::a.b.c.d``) or 6to4 (``2002:AABB:CCDD::``)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if int(ip) >> 32 == 0:
        return ipaddress.IPv4Address(int(ip))
    if any(ip in network for network in _NAT64):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    return None


_V4_PART = re.compile(r"0[xX][0-9A-Fa-f]*|0[0-7]*|[1-9][0-9]*")
_NUMERIC_ISH = re.compile(r"[0-9][0-9A-Fa-fxX]*")


def parse_ip(host: str) -> IP | None:
    """`host` as an address, when it is one in any form a resolver accepts:
    IPv6 (bracketed or not, a zone dropped), dotted IPv4 and the legacy forms
    of ``inet_aton`` (one to four parts, each decimal, ``0x`` hex or ``0``
    octal, the last filling the remaining bytes: ``127.1``, ``0x7f.1``,
    ``2130706433``). None: a host name. `BadURL` for a host that looks numeric
    but is no valid address (``1.2.3.4.5``, ``256.1.1.1``)."""
    text = host.strip().rstrip(".")
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text.split("%", 1)[0])
        except ValueError:
            raise BadURL(f"{host!r} is not a valid IPv6 address") from None
    parts = text.split(".")
    if not parts or not all(_NUMERIC_ISH.fullmatch(p) for p in parts):
        return None  # a name (a label that is not a number)
    if len(parts) > 4 or not all(_V4_PART.fullmatch(p) for p in parts):
        raise BadURL(f"{host!r} is not a valid IPv4 address")
    values = [_part_value(p) for p in parts]
    *head, last = values
    if any(v > 0xFF for v in head) or last >= 256 ** (5 - len(values)):
        raise BadURL(f"{host!r} is not a valid IPv4 address")
    number = last
    for i, value in enumerate(head):
        number |= value << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def _part_value(part: str) -> int:
    if part[:2] in ("0x", "0X"):
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part, 8)
    return int(part)


def url_host(ip: IP) -> str:
    """An address as it stands in a URL (IPv6 in brackets)."""
    return f"[{ip}]" if isinstance(ip, ipaddress.IPv6Address) else str(ip)


@dataclass(frozen=True, slots=True)
class Target:
    """A URL that passed the URL checks: its parts, the host normalised (a
    numeric host as its canonical address, names in lower case without a
    final dot)."""

    scheme: str
    host: str
    port: int
    ip: IP | None
    """The host when it is an address."""
    allowed: bool
    """In `[web] allow_hosts`: the address and port checks do not apply."""


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """The system's resolver (getaddrinfo, in a thread: the loop's default)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return [str(info[4][0]) for info in infos]


class Guard:
    """The policy: allowed ports, the allow list, and how names resolve."""

    def __init__(
        self,
        *,
        ports: Iterable[int] = (80, 443),
        allow: Iterable[tuple[str, int]] = (),
        resolver: Resolver = system_resolver,
    ) -> None:
        self.ports = frozenset(ports)
        self.allow = frozenset((_key(h), p) for h, p in allow)
        self._resolve = resolver

    def target(self, scheme: str, host: str, port: int | None) -> Target:
        """The URL checks (no lookup): scheme, host, port, a numeric host's class."""
        scheme = scheme.lower()
        if scheme not in ("http", "https"):
            shown = scheme or "none"
            raise Refused("scheme", f"only http and https URLs are fetched, not {shown}")
        name = _normal_host(unquote(host))
        if not name:
            raise BadURL("the URL has no host")
        ip = parse_ip(name)
        if ip is not None:
            name = str(ip)
        port = port if port is not None else (443 if scheme == "https" else 80)
        allowed = (name, port) in self.allow
        if not allowed:
            if ip is not None and (rule := classify(ip)) is not None:
                raise Refused(rule, f"{_shown(host, ip)} is {_NAMES[rule]} address")
            if port not in self.ports:
                listed = ", ".join(str(p) for p in sorted(self.ports)) or "none"
                raise Refused("port", f"port {port} is not fetched (allowed: {listed})")
        return Target(scheme, name, port, ip, allowed)

    async def addresses(self, host: str, port: int) -> list[IP]:
        """Where a connection to `host`:`port` may go: the host resolved once
        (an address as it is), every address checked; `Refused` if any is not
        public (unless the pair is allowed), or if the port is not allowed."""
        name = _normal_host(host)
        ip = parse_ip(name)
        allowed = (str(ip) if ip is not None else name, port) in self.allow
        if not allowed and port not in self.ports:
            raise Refused("port", f"port {port} is not fetched")
        if ip is not None:
            found = [ip]
        else:
            try:
                resolved = await self._resolve(name, port)
            except OSError as exc:
                raise ToolFailed(f"could not resolve {name} ({exc.strerror or exc})") from None
            found = list(dict.fromkeys(_address(a) for a in resolved))
            if not found:
                raise ToolFailed(f"{name} resolves to no address")
        if not allowed:
            for address in found:
                if (rule := classify(address)) is not None:
                    raise Refused(rule, f"{_shown(name, address)} is {_NAMES[rule]} address")
        return found


_NAMES: dict[str, str] = {
    "loopback": "a loopback",
    "private": "a private",
    "link-local": "a link-local",
    "unique-local": "a unique-local",
    "shared": "a shared (carrier-grade NAT)",
    "multicast": "a multicast",
    "unspecified": "an unspecified",
    "reserved": "a reserved (not public)",
}


def _shown(host: str, ip: IP) -> str:
    """The host as written and, when it differs, the address it stands for."""
    name = _normal_host(host)
    shown = str(ip)
    if isinstance(ip, ipaddress.IPv6Address) and not (ip.is_loopback or ip.is_unspecified):
        carried = _embedded_v4(ip)
        if carried is not None:  # ::ffff:7f00:1 says less than 127.0.0.1
            shown = f"{ip} = {carried}" if parse_ip(name) is None else str(carried)
    if name == str(ip):
        return shown
    if parse_ip(name) is not None:
        return f"{name} (= {shown})"
    return f"{name} (resolves to {shown})"


def _normal_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def _key(host: str) -> str:
    """A host as the allow list compares it: an address in canonical form."""
    name = _normal_host(host)
    ip = parse_ip(name)
    return str(ip) if ip is not None else name


def _address(text: str) -> IP:
    return ipaddress.ip_address(text.split("%", 1)[0])
