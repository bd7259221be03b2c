"""Switchboard: one AI agent on every chat platform a team uses."""

__version__ = "0.1.0"
