"""The guard's decisions, with name resolution stubbed: no socket is opened
here, so the private, link-local, shared and metadata ranges are tested
without ever being reached."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import pytest

from bot.config import WebSettings
from bot.errors import ConfigError, ToolFailed
from bot.tools.web.guard import BadURL, Guard, Refused, classify, parse_ip


class Resolver:
    """A stub resolver: names → addresses, every lookup counted."""

    def __init__(self, names: dict[str, Sequence[str]]) -> None:
        self.names = names
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.lookups.append(host)
        if host not in self.names:
            raise OSError(-2, "Name or service not known")
        return self.names[host]


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0x7F000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("169.254.169.254.", "169.254.169.254"),
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
        ("[::1]", "::1"),
        ("fe80::1%eth0", "fe80::1"),
        ("example.com", None),
        ("1e100.net", None),
        ("0x7f.example", None),
    ],
)
def test_numeric_hosts_are_normalised_before_the_check(host: str, address: str | None) -> None:
    parsed = parse_ip(host)
    assert (str(parsed) if parsed is not None else None) == address


@pytest.mark.parametrize(
    "host", ["1.2.3.4.5", "256.0.0.1", "0x100.1", "1.0x1000000", "08.1", "[::g]"]
)
def test_a_host_that_looks_numeric_but_is_no_address_is_bad(host: str) -> None:
    with pytest.raises(BadURL):
        parse_ip(host)


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("169.254.0.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fd00::1", "unique-local"),
        ("fd00:ec2::254", "unique-local"),  # AWS metadata over IPv6
        ("fc00::5", "unique-local"),
        ("100.64.0.1", "shared"),
        ("100.100.100.200", "shared"),  # Alibaba's metadata
        ("100.127.255.254", "shared"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("::", "unspecified"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "link-local"),
        ("::127.0.0.1", "loopback"),  # IPv4-compatible (deprecated)
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
        ("2002:c0a8:0101::1", "private"),  # 6to4 of 192.168.1.1
        ("192.0.2.10", "reserved"),
        ("198.18.0.1", "reserved"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("2001:db8::1", "reserved"),
        ("fec0::1", "private"),
        ("8.8.8.8", None),
        ("93.184.216.34", None),
        ("172.32.0.1", None),
        ("100.128.0.1", None),
        ("2606:4700:4700::1111", None),
        ("::ffff:8.8.8.8", None),
    ],
)
def test_the_rule_each_address_breaks(address: str, rule: str | None) -> None:
    assert classify(ipaddress.ip_address(address)) == rule


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        (("file", "", None), "scheme"),
        (("gopher", "example.com", 70), "scheme"),
        (("ftp", "example.com", None), "scheme"),
        (("http", "example.com", 8080), "port"),
        (("http", "10.0.0.1", None), "private"),
        (("https", "192.168.1.1", 443), "private"),
        (("http", "169.254.169.254", None), "link-local"),
        (("http", "[fd00::1]", None), "unique-local"),
        (("http", "100.64.0.1", None), "shared"),
        (("http", "2130706433", None), "loopback"),
        (("http", "0x7f.1", None), "loopback"),
        (("http", "127.1", 80), "loopback"),
        (("http", "[::ffff:10.1.2.3]", None), "private"),
        (("http", "0.0.0.0", None), "unspecified"),
    ],
)
def test_urls_refused_before_any_lookup(url: tuple[str, str, int | None], rule: str) -> None:
    resolver = Resolver({})
    with pytest.raises(Refused) as caught:
        Guard(resolver=resolver).target(*url)
    assert caught.value.rule == rule
    assert str(caught.value).startswith(f"refused (rule={rule}): ")
    assert resolver.lookups == []


def test_an_address_host_is_normalised_and_a_name_kept() -> None:
    guard = Guard()
    assert guard.target("HTTPS", "93.184.216.34", None).port == 443
    target = guard.target("http", "0x5d.0xb8.0xd8.0x22", None)
    assert (target.host, target.port, str(target.ip)) == ("93.184.216.34", 80, "93.184.216.34")
    assert guard.target("http", "Example.COM.", 443).host == "example.com"


@pytest.mark.parametrize(
    ("addresses", "rule"),
    [
        (["10.0.0.1"], "private"),
        (["192.168.1.1"], "private"),
        (["169.254.169.254"], "link-local"),
        (["100.64.0.1"], "shared"),
        (["fd00::1"], "unique-local"),
        (["127.0.0.1"], "loopback"),
        (["::ffff:127.0.0.1"], "loopback"),
        (["93.184.216.34", "10.0.0.1"], "private"),  # any bad address refuses the name
        (["2606:4700::1", "fe80::1%2"], "link-local"),
    ],
)
async def test_a_name_is_refused_when_any_of_its_addresses_is_not_public(
    addresses: list[str], rule: str
) -> None:
    resolver = Resolver({"intranet.example": addresses})
    with pytest.raises(Refused) as caught:
        await Guard(resolver=resolver).addresses("intranet.example", 443)
    assert caught.value.rule == rule
    assert str(caught.value).startswith(f"refused (rule={rule}): intranet.example (resolves to ")
    assert resolver.lookups == ["intranet.example"]


async def test_a_public_name_gives_the_addresses_it_was_checked_with() -> None:
    resolver = Resolver({"news.example": ["93.184.216.34", "2606:2800:220:1::1", "93.184.216.34"]})
    found = await Guard(resolver=resolver).addresses("News.Example.", 443)
    assert [str(a) for a in found] == ["93.184.216.34", "2606:2800:220:1::1"]
    assert resolver.lookups == ["news.example"]


async def test_an_address_is_never_looked_up() -> None:
    resolver = Resolver({})
    with pytest.raises(Refused):
        await Guard(resolver=resolver).addresses("2130706433", 80)
    assert [str(a) for a in await Guard(resolver=resolver).addresses("8.8.8.8", 443)] == ["8.8.8.8"]
    assert resolver.lookups == []


async def test_the_connection_checks_the_port_too() -> None:
    resolver = Resolver({"news.example": ["93.184.216.34"]})
    with pytest.raises(Refused) as caught:
        await Guard(resolver=resolver).addresses("news.example", 22)
    assert caught.value.rule == "port"
    assert resolver.lookups == []


async def test_allow_hosts_is_the_one_way_to_a_private_address() -> None:
    settings = WebSettings(allow_hosts=("wiki.intranet:8443", "10.0.0.7:80", "[FD00:0::1]:8080"))
    resolver = Resolver({"wiki.intranet": ["10.1.2.3"]})
    guard = Guard(ports=settings.ports, allow=settings.allowed_pairs(), resolver=resolver)
    assert [str(a) for a in await guard.addresses("wiki.intranet", 8443)] == ["10.1.2.3"]
    assert guard.target("https", "WIKI.intranet.", 8443).allowed
    assert guard.target("http", "10.0.0.7", None).allowed
    assert guard.target("http", "[fd00::1]", 8080).allowed
    assert guard.target("http", "0xa.0.0.7", 80).allowed  # the same address, written otherwise
    with pytest.raises(Refused) as other_port:
        guard.target("http", "10.0.0.7", 8080)
    assert other_port.value.rule == "private"
    with pytest.raises(Refused):
        await guard.addresses("wiki.intranet", 443)


async def test_a_name_that_does_not_resolve_is_an_error_not_a_refusal() -> None:
    with pytest.raises(ToolFailed) as caught:
        await Guard(resolver=Resolver({})).addresses("nowhere.example", 443)
    assert not isinstance(caught.value, Refused)
    assert "could not resolve nowhere.example" in str(caught.value)


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("wiki.intranet", "is not of the form"),
        ("wiki.intranet:99999", "out of range"),
        ("http://wiki:80", "is not of the form"),
    ],
)
def test_a_bad_allow_hosts_entry_names_the_key(entry: str, problem: str) -> None:
    from bot.config import load_settings

    with pytest.raises(ConfigError) as caught:
        load_settings(environ={"SWITCHBOARD__WEB__ALLOW_HOSTS": f'["{entry}"]'})
    assert "web.allow_hosts" in str(caught.value) and problem in str(caught.value)
