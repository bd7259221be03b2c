"""LLM provider boundary: neutral request/response types live in `types`;
`anthropic` (with `anthropic_search`, its server-side web search's blocks)
is the only code that imports the SDK."""
