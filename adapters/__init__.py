"""Platform adapters: one package per platform (console, telegram, slack, discord).

Each turns platform events into `bot.types.IncomingMessage` and renders the agent's
canonical Markdown replies for its platform (via `bot.formatting`). Adapters never
import each other, and the core never imports an adapter.
"""
