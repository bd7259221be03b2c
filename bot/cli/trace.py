"""`switchboard trace show RUN_ID`: what one run did, step by step.

Prints the run (status, model, conversation, duration, tokens, estimated cost,
error) and its spans in order: each LLM call with its tokens, cache reads and
writes and stop reason, each tool call with its duration and error, and the
internal turns (memory flush, compaction) the run triggered.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import func
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import col, select

from bot.cli.common import open_store
from bot.config import Secrets, Settings
from bot.errors import StartupError
from bot.store.models import Conversation, Run, TokenLog, TraceSpan

if TYPE_CHECKING:
    from bot.store import Store


@dataclass(frozen=True, slots=True)
class Trace:
    run: Run
    conversation_key: str
    spans: list[TraceSpan]
    cost_usd: float


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add `trace show` to the `switchboard` parser's subcommands."""
    trace = sub.add_parser("trace", parents=[common], help="run traces")
    actions = trace.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    show = actions.add_parser("show", parents=[common], help="print the trace of one run")
    show.add_argument("run_id", help="the run id (from logs: run=…)")
    show.set_defaults(func=cmd_trace_show)


async def cmd_trace_show(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    store = open_store(settings)
    try:
        trace = await load_trace(store, args.run_id)
    except SQLAlchemyError as exc:
        raise StartupError(
            f"cannot read traces ({type(exc).__name__}); run `switchboard db upgrade` first?"
        ) from exc
    finally:
        await store.dispose()
    if trace is None:
        print(f"switchboard: no run {args.run_id!r}", file=sys.stderr)
        return 1
    print(format_trace(trace))
    return 0


async def load_trace(store: Store, run_id: str) -> Trace | None:
    async with store.read() as session:
        run = await session.get(Run, run_id)
        if run is None:
            return None
        key = (
            await session.exec(
                select(Conversation.key).where(Conversation.id == run.conversation_id)
            )
        ).first()
        spans = (
            await session.exec(
                select(TraceSpan)
                .where(TraceSpan.run_id == run_id)
                .order_by(col(TraceSpan.started_at), col(TraceSpan.id))
            )
        ).all()
        cost = (
            await session.exec(
                select(func.coalesce(func.sum(TokenLog.cost_usd), 0.0)).where(
                    TokenLog.run_id == run_id
                )
            )
        ).one()
    return Trace(run, key or "?", list(spans), float(cost))


def format_trace(trace: Trace) -> str:
    run = trace.run
    llm_calls = sum(1 for s in trace.spans if s.kind == "llm")
    lines = [
        f"run {run.id}  {run.status}  model {run.model}  persona {run.persona_name or '-'}",
        f"conversation {trace.conversation_key}  user {run.user_id}  source {run.source}",
        f"started {run.started_at:%Y-%m-%d %H:%M:%S} UTC  {_duration(run)}  "
        f"{llm_calls} LLM call{'s' if llm_calls != 1 else ''}  {run.tokens:,} tokens  "
        f"~${trace.cost_usd:.4f}",
    ]
    if run.error:
        lines.append(f"error: {run.error}")
    if not trace.spans:
        lines.append("(no spans recorded)")
        return "\n".join(lines)
    origin = min([run.started_at, *(s.started_at for s in trace.spans)])
    lines.append("")
    for span in trace.spans:
        lines.append(_span_line(span, origin))
    return "\n".join(lines)


def _span_line(span: TraceSpan, origin: datetime) -> str:
    offset = (span.started_at - origin).total_seconds()
    head = f"  +{offset:7.2f}s  {span.kind:<12} {span.name:<28} {span.duration_ms:>7,} ms"
    if span.kind == "tool":
        return head + (f"  ERROR {span.detail or ''}".rstrip() if span.is_error else "  ok")
    tokens = (
        f"  in {span.input_tokens:,}  out {span.output_tokens:,}  "
        f"cache read {span.cache_read_tokens:,} write {span.cache_write_tokens:,}"
    )
    status = f"  ERROR {span.detail}" if span.is_error else f"  {span.detail or ''}"
    return (head + tokens + status).rstrip()


def _duration(run: Run) -> str:
    if run.finished_at is None:
        return "unfinished"
    return f"{(run.finished_at - run.started_at).total_seconds():.2f} s"
