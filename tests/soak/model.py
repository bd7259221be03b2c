"""The soak's model: a responder for the fake Anthropic API that answers every
message by echoing its token, so a reply can be matched to the message it
answers, and that calls tools, streams slowly or fails when the message or
the fault schedule says so.

A message's text carries its token (``m:s0042``) and maybe a directive
(``do:memory``, ``do:wakeup``, ``do:stream``). The current turn is what came
after the last final answer in the request: its tokens, in order, are echoed
in the answer (``ok m:s0042 m:s0043``; merged messages are answered
together). ``do:memory`` first calls `memory_save`, ``do:wakeup`` first calls
`schedule_add` for a wakeup ``WAKEUP_AFTER`` later whose prompt carries the
wakeup's token (``w:s0042``); the wakeup's run echoes that token. Every
request is recorded (`calls`: when, which tokens, how many input tokens the
fake counts), for the checks' own estimate of what a refused message needed.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.anthropic import (
    CONTEXT_TAG,
    ScriptItem,
    estimate_tokens,
    overloaded_error,
    server_error,
    text_reply,
    tool_use_reply,
    truncated_stream,
)

TOKEN = re.compile(r"\b[mw]:[a-z]\d{4}\b")
DIRECTIVE = re.compile(r"\bdo:(memory|wakeup|stream)\b")
WAKEUP_AFTER = "in 45 seconds"
FILLER = (
    "Here is a longer answer, streamed slowly so that the platform shows it while it is "
    "written: drafts, edits and native streams all get their turn before the final text. "
)


@dataclass(frozen=True, slots=True)
class ModelCall:
    at: float
    """time.time() when the request arrived"""
    tokens: tuple[str, ...]
    input_tokens: int
    """The prompt's size as the fake counts it (and reports it in usage)."""


@dataclass
class ModelFaults:
    """The model's share of the fault schedule: 529 / 500 answers and streams
    cut mid-text, at these rates while `on`."""

    rng: random.Random
    error_rate: float = 0.03
    cut_rate: float = 0.02
    on: bool = True
    counts: Counter[str] = field(default_factory=Counter)

    def pick(self, stream: bool) -> str | None:
        if not self.on:
            return None
        roll = self.rng.random()
        if roll < self.error_rate:
            return "model_529" if self.rng.random() < 0.5 else "model_500"
        if stream and roll < self.error_rate + self.cut_rate:
            return "model_cut_stream"
        return None


@dataclass(frozen=True, slots=True)
class Turn:
    tokens: tuple[str, ...]
    directives: frozenset[str]
    tools_called: frozenset[str]


def current_turn(body: dict[str, Any]) -> Turn:
    """The request's current turn: the messages after the last final answer."""
    texts: list[str] = []
    called: set[str] = set()
    for message in reversed(body.get("messages") or []):
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        if message.get("role") == "assistant":
            uses = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
            if not uses:
                break  # the previous turn's answer
            called.update(str(b.get("name")) for b in uses)
            continue
        for block in reversed(blocks):
            if isinstance(block, dict) and block.get("type") == "text":
                text = str(block.get("text") or "")
                if not text.startswith(CONTEXT_TAG):
                    texts.append(text)
    texts.reverse()
    joined = "\n".join(texts)
    tokens = tuple(dict.fromkeys(TOKEN.findall(joined)))
    return Turn(tokens, frozenset(DIRECTIVE.findall(joined)), frozenset(called))


@dataclass
class SoakModel:
    """The responder (`FakeAnthropic.responder`); thread-safe."""

    faults: ModelFaults
    rng: random.Random
    delay: tuple[float, float] = (0.5, 2.0)
    """Seconds before an answer starts (a real model's latency)."""
    calls: list[ModelCall] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> ScriptItem:
        turn = current_turn(body)
        size = estimate_tokens([body.get("system"), body.get("messages"), body.get("tools")])
        stream = bool(body.get("stream"))
        with self._lock:
            self.calls.append(ModelCall(time.time(), turn.tokens, size))
            fault = self.faults.pick(stream)
            delay = self.rng.uniform(*self.delay)
            if fault is not None:
                self.faults.counts[fault] += 1
        answer = self._answer(turn)
        if fault == "model_529":
            return overloaded_error()
        if fault == "model_500":
            return server_error()
        if fault == "model_cut_stream":
            return truncated_stream(answer[: max(1, len(answer) // 2)], abort=True)
        tools = {str(t.get("name")) for t in body.get("tools") or []}
        callable_ = tools - turn.tools_called  # a tool is called once per turn
        if "memory" in turn.directives and "memory_save" in callable_:
            fact = f"soak fact for {' '.join(turn.tokens) or 'nobody'}"
            return tool_use_reply(("memory_save", {"text": fact}), delay=delay)
        if "wakeup" in turn.directives and "schedule_add" in callable_:
            wakeups = [t.replace("m:", "w:", 1) for t in turn.tokens if t.startswith("m:")]
            prompt = f"Wakeup {' '.join(wakeups)}: say that it fired."
            args = {"prompt": prompt, "when": WAKEUP_AFTER}
            return tool_use_reply(("schedule_add", args), delay=delay)
        if "stream" in turn.directives:
            return text_reply(answer, delay=delay, chunk_size=12, chunk_delay=0.08)
        return text_reply(answer, delay=delay)

    def _answer(self, turn: Turn) -> str:
        said = " ".join(turn.tokens) or "(no token)"
        if "stream" in turn.directives:
            return f"ok {said}. {FILLER * 2}"
        if any(t.startswith("w:") for t in turn.tokens):
            return f"fired {said}"
        return f"ok {said}"
