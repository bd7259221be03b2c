"""The one place that chooses a Telegram library: the transports are imported
only here, and only when chosen, so the shared adapter code never depends on
either library."""

from __future__ import annotations

from adapters.telegram.transport import Library, Transport


def make_transport(library: Library, token: str, api_base_url: str) -> Transport:
    """The transport of the configured library (imported only now)."""
    if library == "aiogram":
        from adapters.telegram.aiogram_transport import AiogramTransport

        return AiogramTransport(token, api_base_url)
    from adapters.telegram.ptb_transport import PTBTransport

    return PTBTransport(token, api_base_url)
