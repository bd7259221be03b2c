"""Scheduled jobs: next run, last outcome; pause, resume and delete (audited
as the CLI's `switchboard jobs …` is, with where "web")."""

from __future__ import annotations

from aiohttp import web

from bot.scheduling.jobs import Action
from bot.types import utcnow
from bot.web.admin.auth import Credential
from bot.web.admin.site import ACTOR, Site, see_other

ACTIONS: dict[str, Action] = {"pause": "pause", "resume": "resume", "delete": "remove"}


async def jobs(site: Site, request: web.Request, credential: Credential) -> web.StreamResponse:
    show_all = request.query.get("all") == "1"
    infos = await site.deps.jobs.listing(include_closed=show_all)
    owners: dict[int, str] = {}
    for info in infos:
        owner = info.job.owner_user_id
        if owner not in owners:
            person = await site.deps.ops.directory.get(owner)
            owners[owner] = person.handle if person else f"#{owner}"
    return site.render(
        request, credential, "jobs.html", "jobs", infos=infos, owners=owners, show_all=show_all
    )


async def change(site: Site, request: web.Request, credential: Credential) -> web.StreamResponse:
    action = ACTIONS.get(request.match_info["action"])
    if action is None:
        return site.problem(request, credential, 404, "No such job action.")
    job_id = int(request.match_info["job_id"])
    job = await site.deps.jobs.change(job_id, action, utcnow())
    if job is None:
        return site.problem(request, credential, 404, f"There is no open job #{job_id}.")
    await site.deps.ops.audit.record(
        actor=ACTOR.handle,
        action=f"jobs {action}",
        target=f"job #{job.id}",
        where=ACTOR.where,
        details={"state": job.state},
    )
    raise see_other("/admin/jobs", action)
