"""TLS client contexts, made once per process and shared by every HTTP client
(the model's, the web tools'): loading the system's CA certificates costs about
0.1 s of CPU each time, which every client and every `App` would pay again."""

from __future__ import annotations

import functools
import ssl

import httpx2


@functools.cache
def client_context(*, trust_env: bool = True) -> ssl.SSLContext:
    """The verifying client context the HTTP clients would each make
    (`trust_env`: honour SSL_CERT_FILE / SSL_CERT_DIR). Shared: never change it."""
    return httpx2.create_ssl_context(trust_env=trust_env)
