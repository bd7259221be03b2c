"""Who sent a request: the client's address, as far as this server can know it.

Without a proxy (`[server] trust_proxy = false`, the default) it is the TCP
peer's address, and `X-Forwarded-For` is ignored: anyone can send that header,
so believing it would let a client be whoever it likes.

Behind one reverse proxy that terminates TLS (`trust_proxy = true`) the peer
is the proxy, and the client's address is the right-most entry of
`X-Forwarded-For` (all its header lines read as one list): the one the proxy
appended itself for the connection it received. Entries to its left came
with the request and may be forged. With a chain of proxies, the one nearest
this server must set the header to the address it saw (nginx: `proxy_set_header
X-Forwarded-For $remote_addr`, or its realip module upstream), since only its
entry is checked. An entry that is not an IP address (or none at all: a
request that did not pass the proxy) leaves the peer's address.
"""

from __future__ import annotations

import ipaddress

from aiohttp import web

UNKNOWN = "?"
"""The address of a request whose peer is not an IP socket."""


def client_address(request: web.Request, trust_proxy: bool) -> str:
    """The client's IP address as text (IPv6 compressed), or the peer's."""
    peer = request.remote or UNKNOWN
    if not trust_proxy:
        return peer
    hops = ",".join(request.headers.getall("X-Forwarded-For", ()))
    forwarded = ip_text(hops.rsplit(",", 1)[-1])
    return peer if forwarded is None else forwarded


def forwarded_https(request: web.Request) -> bool | None:
    """What the proxy says of the client's scheme (`X-Forwarded-Proto`, its
    right-most entry): https or not; None when it says nothing."""
    protos = ",".join(request.headers.getall("X-Forwarded-Proto", ()))
    last = protos.rsplit(",", 1)[-1].strip().lower()
    return None if not last else last == "https"


def ip_text(value: str) -> str | None:
    """`value` as a normalized IP address, or None when it is not one. Accepts
    what proxies write: "203.0.113.7", "2001:db8::1", "[2001:db8::1]",
    "203.0.113.7:51234", "[2001:db8::1]:443"."""
    value = value.strip()
    if value.startswith("["):
        value = value[1:].split("]", 1)[0]
    elif value.count(":") == 1:  # IPv4 with a port
        value = value.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)
