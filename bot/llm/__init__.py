"""LLM provider boundary: neutral request/response types live in `types`;
`anthropic` is the only module that imports the SDK."""
