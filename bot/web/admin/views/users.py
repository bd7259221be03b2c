"""Users: role, platform accounts, budget used of allowed (with a bar), and
forms to change the budget and the role, through `AdminOps` (audited)."""

from __future__ import annotations

from aiohttp import web

from bot.accounts.budgets import BudgetStatus
from bot.accounts.ops import ASSIGNABLE
from bot.errors import CommandDenied, CommandError
from bot.web.admin.auth import Credential
from bot.web.admin.site import ACTOR, Site, form_text, see_other


def percent(status: BudgetStatus) -> int | None:
    """Used of the limit in whole percent (capped at 100); None: unlimited."""
    if status.limit is None:
        return None
    if status.limit <= 0:
        return 100
    return min(100, round(100 * status.used / status.limit))


async def users(site: Site, request: web.Request, credential: Credential) -> web.StreamResponse:
    ops = site.deps.ops
    rows = []
    for person in await ops.directory.people():
        status = await ops.budgets.status(person.id, person.role)
        rows.append((person, status, percent(status)))
    return site.render(
        request,
        credential,
        "users.html",
        "users",
        rows=rows,
        roles=[role.value for role in ASSIGNABLE],
    )


async def set_budget(
    site: Site, request: web.Request, credential: Credential
) -> web.StreamResponse:
    return await _change(site, request, credential, "budget")


async def set_role(site: Site, request: web.Request, credential: Credential) -> web.StreamResponse:
    return await _change(site, request, credential, "role")


async def _change(
    site: Site, request: web.Request, credential: Credential, what: str
) -> web.StreamResponse:
    ops = site.deps.ops
    person = await ops.directory.get(int(request.match_info["user_id"]))
    if person is None:
        return site.problem(request, credential, 404, "There is no such user.")
    try:
        value = await form_text(request, what)
        if what == "budget":
            await ops.set_budget(ACTOR, person, value)
        else:
            await ops.set_role(ACTOR, person, value)
    except (ValueError, CommandError) as exc:
        return site.problem(request, credential, 400, str(exc))
    except CommandDenied as exc:
        return site.problem(request, credential, 403, str(exc))
    raise see_other("/admin/users", what)
