"""Runs: the recent ones (status, tokens, duration), and one run's trace (its
spans: LLM calls with tokens, tool calls with errors) — the data of
`switchboard trace list|show`, from `bot.store.traces`."""

from __future__ import annotations

from aiohttp import web

from bot.store.traces import load_trace, nested, recent_runs
from bot.web.admin.auth import Credential
from bot.web.admin.site import Site

LIMIT = 50


async def runs(site: Site, request: web.Request, credential: Credential) -> web.StreamResponse:
    conversation = request.query.get("conversation", "").strip()[:400] or None
    lines = await recent_runs(site.deps.store, LIMIT, conversation=conversation)
    return site.render(
        request, credential, "runs.html", "runs", lines=lines, conversation=conversation or ""
    )


async def trace(site: Site, request: web.Request, credential: Credential) -> web.StreamResponse:
    found = await load_trace(site.deps.store, request.match_info["run_id"][:64])
    if found is None:
        return site.problem(request, credential, 404, "There is no such run.")
    run = found.run
    origin = min([run.started_at, *(s.started_at for s in found.spans)])
    spans = [
        (span, (span.started_at - origin).total_seconds(), depth)
        for span, depth in nested(found.spans)
    ]
    duration = (
        None if run.finished_at is None else (run.finished_at - run.started_at).total_seconds()
    )
    return site.render(
        request,
        credential,
        "trace.html",
        "runs",
        trace=found,
        run=run,
        spans=spans,
        duration=duration,
        llm_calls=sum(1 for s in found.spans if s.kind == "llm"),
        tool_calls=sum(1 for s in found.spans if s.kind == "tool"),
    )
