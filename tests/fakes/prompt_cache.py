"""Prompt caching as the Messages API documents it, for the fake server.

The prompt is a sequence of blocks in the API's order (tools, system, each
message's content blocks). A request reads the longest prefix cached at one of
its breakpoints or up to 20 blocks before one, writes what lies between that
hit and its last breakpoint, and caches the prefixes ending at its breakpoints
— only those of at least the minimum length. Entries are per model and never
expire here. Tokens are estimated (JSON characters / 4).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Any

LOOKBACK_BLOCKS = 20


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def prompt_blocks(body: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """The prompt as the cache sees it, in order (tools, system, messages): each block's
    canonical JSON without `cache_control`, and whether it carries a breakpoint."""

    def canonical(block: Any, prefix: str = "") -> tuple[str, bool]:
        if not isinstance(block, dict):
            return prefix + json.dumps(block, sort_keys=True), False
        marked = bool(block.get("cache_control"))
        clean = {k: v for k, v in block.items() if k != "cache_control"}
        return prefix + json.dumps(clean, sort_keys=True, ensure_ascii=False), marked

    found = [canonical(t) for t in _blocks(body.get("tools"))]
    system = body.get("system")
    found += [canonical(system)] if isinstance(system, str) else map(canonical, _blocks(system))
    for mi, msg in enumerate(_blocks(body.get("messages"))):
        content = msg.get("content")
        role = f"{mi}:{msg.get('role')}:"
        if isinstance(content, str):
            found.append(canonical(content, role))
        else:
            found += [canonical(b, role) for b in _blocks(content)]
    return found


class PromptCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: set[tuple[str, str]] = set()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def usage(self, body: Mapping[str, Any], min_tokens: int) -> tuple[int, int, int]:
        """(fresh input, cache read, cache write) tokens of `body`; updates the cache."""
        blocks = prompt_blocks(body)
        keys: list[str] = []
        sizes: list[int] = []
        model = str(body.get("model"))
        digest = hashlib.sha256(model.encode())
        total = 0
        for text, _ in blocks:
            digest.update(text.encode())
            keys.append(digest.hexdigest())
            total += max(1, len(text) // 4)
            sizes.append(total)
        points = [i for i, (_, marked) in enumerate(blocks) if marked]
        with self._lock:
            hit = -1
            for point in points:
                for i in range(point, max(-1, point - LOOKBACK_BLOCKS), -1):
                    if (model, keys[i]) in self._entries:
                        hit = max(hit, i)
                        break
            read = sizes[hit] if hit >= 0 else 0
            written = 0
            cacheable = [p for p in points if sizes[p] >= min_tokens]
            if cacheable and max(cacheable) > hit:
                written = sizes[max(cacheable)] - read
            for point in cacheable:
                self._entries.add((model, keys[point]))
        return total - read - written, read, written
