"""`switchboard trace list` and `switchboard trace show RUN_ID`.

`list` prints the recent runs, newest first, one aligned line each: run id,
start time, conversation, user, status, tokens and duration (`--limit N`,
`--user USER`, `--conversation KEY`). `show` prints what one run did, step by
step: the run (status, model, conversation, duration, tokens, estimated cost,
error) and its spans in order: each LLM call with its tokens, cache reads and
writes and stop reason, each tool call with its duration and error, and the
internal turns (memory flush, compaction) the run triggered.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from bot.errors import CommandError, StartupError

if TYPE_CHECKING:  # what the commands use is imported when one runs (`bot.cli`)
    from datetime import datetime

    from bot.config import Secrets, Settings
    from bot.store.models import Run, TraceSpan
    from bot.store.traces import RunLine, Trace


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add `trace list` and `trace show` to the `switchboard` parser's subcommands."""
    trace = sub.add_parser("trace", parents=[common], help="run traces")
    actions = trace.add_subparsers(dest="trace_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", parents=[common], help="recent runs, newest first")
    listing.add_argument("--limit", type=_positive, default=20, help="runs to show (default 20)")
    listing.add_argument("--user", help="only this user's runs: platform:user_id or user id")
    listing.add_argument(
        "--conversation", help="only this conversation (its key, e.g. slack:C1:-, or a prefix)"
    )
    listing.set_defaults(func=cmd_trace_list)
    show = actions.add_parser("show", parents=[common], help="print the trace of one run")
    show.add_argument("run_id", help="the run id (from logs: run=…)")
    show.set_defaults(func=cmd_trace_show)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


async def cmd_trace_list(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from bot.accounts.directory import Directory, UnknownUser
    from bot.accounts.identity import Identity
    from bot.cli.common import open_store
    from bot.store.traces import recent_runs

    store = open_store(settings)
    try:
        user_id = None
        if args.user:
            directory = Directory(store, Identity(store, settings.admin.owners))
            try:
                user_id = (await directory.lookup(args.user)).id
            except UnknownUser as exc:
                raise CommandError(str(exc)) from None
        runs = await recent_runs(store, args.limit, user_id, args.conversation)
    except SQLAlchemyError as exc:
        raise StartupError(
            f"cannot read runs ({type(exc).__name__}); run `switchboard db upgrade` first?"
        ) from exc
    finally:
        await store.dispose()
    if not runs:
        print("no runs yet" if not (args.user or args.conversation) else "no matching runs")
        return 0
    print("\n".join(format_runs(runs)))
    return 0


def format_runs(lines: list[RunLine]) -> list[str]:
    """A header and one aligned line per run."""
    from bot.formatting.text import columns

    rows = [["RUN", "STARTED (UTC)", "CONVERSATION", "USER", "STATUS", "TOKENS", "DURATION"]]
    for line in lines:
        run = line.run
        rows.append(
            [
                run.id,
                f"{run.started_at:%Y-%m-%d %H:%M:%S}",
                line.conversation_key,
                line.user,
                run.status,
                f"{run.tokens:,}",
                _duration(run) if run.finished_at else "-",
            ]
        )
    return columns(rows, "<<<<<>>")


async def cmd_trace_show(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from bot.cli.common import open_store
    from bot.store.traces import load_trace

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


def format_trace(trace: Trace) -> str:
    from bot.formatting.text import noun

    run = trace.run
    llm_calls = sum(1 for s in trace.spans if s.kind == "llm")
    lines = [
        f"run {run.id}  {run.status}  model {run.model}  persona {run.persona_name or '-'}",
        f"conversation {trace.conversation_key}  user {run.user_id}  source {run.source}",
        f"started {run.started_at:%Y-%m-%d %H:%M:%S} UTC  {_duration(run)}  "
        f"{llm_calls} LLM {noun(llm_calls, 'call')}  {run.tokens:,} {noun(run.tokens, 'token')}  "
        f"~${trace.cost_usd:.4f}",
    ]
    if run.error:
        lines.append(f"error: {run.error}")
    if not trace.spans:
        lines.append("(no spans recorded)")
        return "\n".join(lines)
    origin = min([run.started_at, *(s.started_at for s in trace.spans)])
    lines.append("")
    from bot.store.traces import nested

    for span, depth in nested(trace.spans):
        lines.append(_span_line(span, origin, depth))
    return "\n".join(lines)


def _span_line(span: TraceSpan, origin: datetime, depth: int = 0) -> str:
    offset = (span.started_at - origin).total_seconds()
    kind = "  " * depth + ("└ " if depth else "") + span.kind
    width = 28 - 4 * depth
    name = span.name[:width]
    head = f"  +{offset:7.2f}s  {kind:<{40 - width}} {name:<{width}} {span.duration_ms:>7,} ms"
    if span.kind in ("tool", "server_tool"):  # the detail: an error, or what was fetched
        if span.is_error:
            return head + f"  ERROR {span.detail or ''}".rstrip()
        return head + (f"  ok  {span.detail}" if span.detail else "  ok")
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
