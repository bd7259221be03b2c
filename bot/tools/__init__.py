"""Tools the agent may call: the registry and the built-in tools."""
