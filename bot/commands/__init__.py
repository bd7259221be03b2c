"""Slash commands: the registry, the commands every deployment has, and the
admin commands. Commands never reach the LLM and cost nothing."""
