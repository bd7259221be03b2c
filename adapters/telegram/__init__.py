"""Telegram adapter: replies are rendered as Telegram HTML (parse_mode=HTML)."""

from adapters.telegram.render import render

__all__ = ["render"]
