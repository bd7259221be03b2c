"""HTTP for `web_fetch`, through the guard (`bot.tools.web.guard`).

The connection is where the guard decides: `GuardedBackend` is the network
backend of an httpcore connection pool, so every TCP connection the pool
opens (the first request's and every redirect's) asks `Guard.addresses`,
which resolves the host once and checks every address, and then connects to
one of those addresses itself. Nothing else resolves the name: httpcore
hands the backend the URL's host, the backend connects to an address. TLS is
unchanged: httpcore starts it on that connection with the URL's host as the
server name, so SNI is sent and the certificate is verified for the name,
not for the address.

`GuardedTransport` puts that pool behind httpx's transport interface, so
requests and responses are httpx's own (headers, content decoding, charset).
No client object is kept: there is no cookie jar to carry one person's
cookies into another's fetch, no proxy taken from the environment (a proxy
would resolve names itself, past the guard), no redirect followed without
being checked again (`WebClient.open` follows them itself, at most
`max_redirects`).
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import httpcore2
import httpx2

from bot.errors import ToolFailed
from bot.tls import client_context
from bot.tools.web.guard import Guard, Refused, url_host

log = logging.getLogger("switchboard.web")

SOCKET_OPTION = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """Connects only where the guard allows, to an address it checked."""

    def __init__(self, guard: Guard, inner: httpcore2.AsyncNetworkBackend | None = None) -> None:
        self._guard = guard
        self._inner = inner or httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        addresses = await self._guard.addresses(host, port)
        failure: Exception | None = None
        for address in addresses:  # each one checked: trying the next is as safe
            try:
                return await self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise Refused("scheme", "unix sockets are never fetched")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx2.AsyncBaseTransport):
    """httpx's transport interface over a connection pool on `GuardedBackend`."""

    def __init__(
        self, guard: Guard, *, ssl_context: ssl.SSLContext | None = None, max_connections: int = 50
    ) -> None:
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=ssl_context or client_context(trust_env=False),
            max_connections=max_connections,
            max_keepalive_connections=max_connections // 5 or 1,
            keepalive_expiry=30.0,
            network_backend=GuardedBackend(guard),
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        assert isinstance(request.stream, httpx2.AsyncByteStream)
        core = httpcore2.Request(
            method=request.method,
            url=httpcore2.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _mapped(request):
            response = await self._pool.handle_async_request(core)
        stream = response.stream
        assert isinstance(stream, AsyncIterable)
        return httpx2.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(stream, request),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


class _Body(httpx2.AsyncByteStream):
    def __init__(self, stream: AsyncIterable[bytes], request: httpx2.Request) -> None:
        self._stream = stream
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped(self._request):
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


@contextlib.contextmanager
def _mapped(request: httpx2.Request) -> Iterator[None]:
    """httpcore's errors as httpx's (the guard's own pass through as they are)."""
    try:
        yield
    except httpcore2.TimeoutException as exc:
        raise httpx2.TimeoutException(str(exc), request=request) from exc
    except httpcore2.ConnectError as exc:
        raise httpx2.ConnectError(str(exc), request=request) from exc
    except (httpcore2.NetworkError, httpcore2.ProtocolError) as exc:
        raise httpx2.TransportError(str(exc)) from exc


@dataclass(slots=True)
class Opened:
    """A response whose headers are in (its body not read yet)."""

    response: httpx2.Response
    url: str
    """Where the response came from (after redirects)."""
    redirects: list[str] = field(default_factory=list)
    """The URLs redirected from, in order."""

    @property
    def status(self) -> int:
        return self.response.status_code

    @property
    def content_type(self) -> str:
        return self.response.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    @property
    def declared_length(self) -> int | None:
        value = self.response.headers.get("content-length", "")
        return int(value) if value.isdigit() else None

    async def read(self, max_bytes: int) -> tuple[bytes, bool]:
        """The body (decoded), at most `max_bytes`; True when there was more
        (the rest is not read: the connection is dropped)."""
        parts: list[bytes] = []
        size = 0
        async for chunk in self.response.aiter_bytes():
            if size + len(chunk) > max_bytes:
                parts.append(chunk[: max_bytes - size])
                return b"".join(parts), True
            parts.append(chunk)
            size += len(chunk)
        return b"".join(parts), False


class WebClient:
    """GET through the guard, following redirects (each one checked again)."""

    def __init__(
        self,
        guard: Guard,
        *,
        user_agent: str,
        max_redirects: int = 5,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.guard = guard
        self.max_redirects = max_redirects
        self._headers = {
            "User-Agent": user_agent,
            "Accept": "text/html,application/xhtml+xml,application/pdf,text/*;q=0.9,"
            "application/json;q=0.9,*/*;q=0.5",
            "Accept-Encoding": "gzip, deflate",
        }
        self._transport = GuardedTransport(guard, ssl_context=ssl_context)

    @contextlib.asynccontextmanager
    async def open(self, url: str, step_seconds: float) -> AsyncIterator[Opened]:
        """The response to GET `url` once redirects are followed; closed on exit.
        `step_seconds` bounds each network step (the caller bounds the whole)."""
        redirects: list[str] = []
        current = self._checked(url)
        while True:
            request = httpx2.Request(
                "GET",
                current,
                headers=self._headers,
                extensions={"timeout": httpx2.Timeout(step_seconds).as_dict()},
            )
            try:
                response = await self._transport.handle_async_request(request)
            except Refused as refused:
                raise _after(refused, redirects) from None
            response.request = request
            location = response.headers.get("location")
            if response.status_code in (301, 302, 303, 307, 308) and location:
                await response.aclose()
                if len(redirects) >= self.max_redirects:
                    raise Refused("redirect", f"more than {self.max_redirects} redirects")
                redirects.append(str(current))
                try:
                    current = self._checked(str(current.join(location)))
                except Refused as refused:
                    raise _after(refused, redirects) from None
                continue
            try:
                yield Opened(response, str(current), redirects)
            finally:
                await response.aclose()
            return

    def _checked(self, url: str) -> httpx2.URL:
        """`url` after the URL checks, its host normalised (a numeric host as
        its canonical address, which httpx would not parse in every form)."""
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError as exc:
            raise ToolFailed(f"not a valid URL ({exc}): {url[:200]!r}") from None
        target = self.guard.target(parts.scheme, parts.hostname or "", port)
        host = url_host(target.ip) if target.ip is not None else target.host
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@{host}" if auth else host
        if port is not None:
            netloc += f":{port}"
        try:
            return httpx2.URL(urlunsplit(parts._replace(netloc=netloc)))
        except httpx2.InvalidURL as exc:
            raise ToolFailed(f"not a valid URL ({exc}): {url[:200]!r}") from None

    async def aclose(self) -> None:
        await self._transport.aclose()


def _after(refused: Refused, redirects: list[str]) -> Refused:
    if not redirects:
        return refused
    return Refused(refused.rule, f"{refused.why} (a redirect from {redirects[-1]})")
