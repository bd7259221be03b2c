"""The terminal adapter: `switchboard chat` reads lines from stdin, prints replies."""

from adapters.console.adapter import ConsoleAdapter, create_adapter

__all__ = ["ConsoleAdapter", "create_adapter"]
