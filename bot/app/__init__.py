"""Wiring and lifecycle: build the service from settings, start, drain, stop."""

from bot.app.service import App, load_adapter, make_provider

__all__ = ["App", "load_adapter", "make_provider"]
