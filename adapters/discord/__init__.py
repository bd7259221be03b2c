"""Discord adapter (discord.py 2.x): gateway messages and slash commands in, Discord
Markdown replies out. `discord.py` is imported only when this package is."""

from adapters.discord.adapter import DiscordAdapter, create_adapter
from adapters.discord.parse import parse_interaction, parse_message
from adapters.discord.render import render

__all__ = ["DiscordAdapter", "create_adapter", "parse_interaction", "parse_message", "render"]
