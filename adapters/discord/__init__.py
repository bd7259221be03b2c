"""Discord adapter: replies are rendered as Discord Markdown."""

from adapters.discord.render import render

__all__ = ["render"]
