"""Model Context Protocol servers as the agent's tools.

`McpServers` (`servers.py`) keeps one long-lived session per configured server
(`link.py`: stdio subprocess or streamable HTTP, `transport.py`), reconnecting
with backoff; each server's tools (`tools.py`, named and checked by
`names.py`, results converted by `content.py`) are put in the tool registry as
one group, replaced whenever the server's list changes. `probe.py` connects
once for the operator (`switchboard mcp list | call`). Counted in
`metrics.py`. `status.py` and `metrics.py` are all the service imports when no
server is configured: the SDK is loaded only for a configured server.
"""
