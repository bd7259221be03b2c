"""The soak's verdict: pure functions over `Facts`, each counting one thing the
issue asks about, and `judge`, which puts them in a table with what each must
be. A message is matched to the replies that answer it by its token (the
fake model echoes it); nothing here takes the service's word for what it did
beyond the rows it keeps.

- answered once / twice: how many of the bot's messages (final texts) carry
  the token;
- refused: its inbox row ended `refused` (or its run did); failed and
  recorded: its inbox row ended `failed` and `switchboard admin inbox` shows it
  with its error, or its reply is recorded as undeliverable;
- lost: accepted and none of these;
- out of order: in a conversation, a message answered in an earlier message of
  the bot's than one sent before it;
- a false refusal: a refusal recorded with its figures (`used= held=
  estimate= allowance=`) whose figures do not hold against the soak's own
  facts: the allowance is not the user's, `used` is more than the token logs
  show by the refusal's end, the estimate is less than `MIN_OUTPUT` or far
  above the conversation's requests the model counted, or `used + estimate`
  is within the allowance; without figures, the user's settled usage (token
  logs up to the refusal) plus a minimal estimate of the refused request (the
  input of the conversation's latest request the model saw by then, else the
  smallest of the soak, plus `MIN_OUTPUT`) is within the allowance;
- mis-charged: `used + overage` differs from the sum of the user's token logs;
  overspent: past the allowance by more than the user's largest call;
- wakeups: due (their time passed) vs carried by exactly one message;
- stuck: inbox, outbox or scheduled fires not finished after the drain;
- unexplained errors: ERROR lines of the services not tied (by their run id)
  to a run, a message or a reply whose error is recorded.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.soak.facts import REFUSAL_MARKERS, BotMessage, Facts, InboxRow, Message
from tests.soak.model import TOKEN

MIN_OUTPUT = 256
"""The least output a call is made for (the refusal contract's estimate)."""
SANE_INPUT_FACTOR = 2
SANE_INPUT_SLACK = 1024
"""A refused request's input is at most this far above the largest request of
its conversation the model counted (its counting differs from the service's
a little; the request adds the last answer and the new message)."""
CONTRACT = re.compile(r"used=(\d+) held=(\d+) estimate=(\d+) allowance=(\d+)")
FINAL_FAILED = ("failed", "timeout")


def answers(facts: Facts) -> dict[str, list[BotMessage]]:
    """token → the bot's messages carrying it, in creation order."""
    found: dict[str, list[BotMessage]] = defaultdict(list)
    for bot in sorted(facts.bot_messages, key=lambda b: (b.conversation, b.seq)):
        for token in dict.fromkeys(TOKEN.findall(bot.text)):
            found[token].append(bot)
    return found


def _rows(facts: Facts) -> dict[str, list[InboxRow]]:
    rows: dict[str, list[InboxRow]] = defaultdict(list)
    for row in facts.inbox:
        if row.token is not None:
            rows[row.token].append(row)
    return rows


def refused_tokens(facts: Facts) -> dict[str, InboxRow]:
    """token → its refused inbox row (the row's state, or its run's status)."""
    refused_runs = {r.id for r in facts.runs if r.status == "refused"}
    out: dict[str, InboxRow] = {}
    for token, rows in _rows(facts).items():
        for row in rows:
            if row.state == "refused" or (row.run_id is not None and row.run_id in refused_runs):
                out[token] = row
    return out


def _failed_recorded(facts: Facts, rows: list[InboxRow]) -> bool:
    undeliverable = {run_id for run_id, _ in facts.outbox_failed if run_id}
    for row in rows:
        if row.state in FINAL_FAILED and row.error and row.listed:
            return True
        if row.run_id is not None and row.run_id in undeliverable:
            return True
    return False


@dataclass
class Outcomes:
    accepted: list[Message] = field(default_factory=list)
    answered_once: list[str] = field(default_factory=list)
    answered_twice: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    failed_recorded: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


def outcomes(facts: Facts) -> Outcomes:
    found, rows, refused = answers(facts), _rows(facts), refused_tokens(facts)
    out = Outcomes()
    for message in facts.messages:
        if not message.accepted:
            continue
        out.accepted.append(message)
        token, carried = message.token, found.get(message.token, [])
        if len(carried) == 1:
            out.answered_once.append(token)
        elif len(carried) > 1:
            texts = " | ".join(b.text[:60] for b in carried)
            out.answered_twice.append(f"{token} in {len(carried)} messages: {texts}")
        elif token in refused:
            out.refused.append(token)
        elif _failed_recorded(facts, rows.get(token, [])):
            out.failed_recorded.append(token)
        else:
            states = ",".join(r.state for r in rows.get(token, [])) or "no inbox row"
            out.lost.append(f"{token} ({message.conversation}; {states})")
    return out


def out_of_order(facts: Facts) -> list[str]:
    """Messages answered before a message sent earlier in their conversation."""
    found = answers(facts)
    by_conversation: dict[str, list[Message]] = defaultdict(list)
    for message in facts.messages:
        if message.accepted:
            by_conversation[message.conversation].append(message)
    problems = []
    for conversation, messages in by_conversation.items():
        latest: tuple[int, str] | None = None  # (seq of the latest answer so far, its token)
        for message in sorted(messages, key=lambda m: m.order):
            carried = [b for b in found.get(message.token, []) if b.conversation == conversation]
            if not carried:
                continue
            seq = carried[0].seq
            if latest is not None and seq < latest[0]:
                problems.append(
                    f"{conversation}: {message.token} answered before {latest[1]}, sent earlier"
                )
            if latest is None or seq > latest[0]:
                latest = (seq, message.token)
    return problems


def false_refusals(facts: Facts) -> list[str]:
    accounts = {a.user: a for a in facts.accounts}
    conversation_of = {m.token: m.conversation for m in facts.messages}
    messages = {m.token: m for m in facts.messages}
    calls_in: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for call in facts.model_calls:
        for token in call.tokens:
            conversation = conversation_of.get(token.replace("w:", "m:", 1))
            if conversation is not None:
                calls_in[conversation].append((call.at, call.input_tokens))
                break
    smallest = min((c.input_tokens for c in facts.model_calls), default=0)
    claims = {r.id: r.error for r in facts.runs}
    problems = []
    for token, row in refused_tokens(facts).items():
        message = messages.get(token)
        account = accounts.get(row.user)
        if message is None or account is None or account.allowance is None:
            if account is not None and account.allowance is None:
                problems.append(f"{token}: refused, but {row.user}'s budget is unlimited")
            continue
        moment = row.finished_at if row.finished_at is not None else facts.checked_at
        settled = sum(
            c.tokens for c in facts.charges if c.user_id == account.user_id and c.at <= moment
        )
        before = [size for at, size in calls_in.get(message.conversation, []) if at <= moment]
        claim = claims.get(row.run_id or "") or row.error or ""
        figures = CONTRACT.search(claim)
        if figures is not None:
            wrong = _figures_wrong(
                [int(n) for n in figures.groups()],
                settled,
                account.allowance,
                max(before) if before else smallest,
            )
            if wrong:
                problems.append(f"{token} ({row.user}): {wrong}; the service said: {claim[:160]}")
            continue
        estimate = (before[-1] if before else smallest) + MIN_OUTPUT
        if settled + estimate <= account.allowance:
            said = f"; the service said: {claim[:160]}" if claim else ""
            problems.append(
                f"{token} ({row.user}): settled {settled} + estimate {estimate} "
                f"<= allowance {account.allowance}{said}"
            )
    return problems


def _figures_wrong(figures: list[int], settled: int, allowance: int, seen: int) -> str | None:
    """What is wrong with the figures a refusal was recorded with, checked
    against the soak's own facts (None: a fair refusal). `settled`: the token
    logs by the refusal's end (a call is logged as it is charged, so the
    usage decided on cannot be more); `seen`: the largest request of the
    conversation the model counted by then (a refused request is that
    conversation and a message more, so its input is not far above)."""
    used, _held, estimate, recorded = figures
    if recorded != allowance:
        return f"recorded allowance {recorded}, the user's is {allowance}"
    if used > settled:
        return f"recorded used {used}, the token logs show {settled} by then"
    if not MIN_OUTPUT <= estimate <= MIN_OUTPUT + SANE_INPUT_FACTOR * seen + SANE_INPUT_SLACK:
        return f"estimate {estimate} is not a call's (the conversation's requests: {seen})"
    if used + estimate <= allowance:
        return f"used {used} + estimate {estimate} <= allowance {allowance}"
    return None


def _spent(facts: Facts) -> dict[int, list[int]]:
    spent: dict[int, list[int]] = defaultdict(list)
    for charge in facts.charges:
        spent[charge.user_id].append(charge.tokens)
    return spent


def mischarged(facts: Facts) -> list[str]:
    spent = _spent(facts)
    problems = []
    for account in facts.accounts:
        logged = sum(spent.get(account.user_id, []))
        if account.used + account.overage != logged:
            problems.append(
                f"{account.user}: used {account.used} + overage {account.overage} "
                f"!= token logs {logged}"
            )
    return problems


def overspent(facts: Facts) -> list[str]:
    spent = _spent(facts)
    problems = []
    for account in facts.accounts:
        calls = spent.get(account.user_id, [])
        if account.allowance is None or not calls:
            continue
        over = sum(calls) - account.allowance
        if over > max(calls):
            problems.append(
                f"{account.user}: spent {sum(calls)}, allowance {account.allowance}, "
                f"over by {over} (largest call {max(calls)})"
            )
    return problems


def wakeups(facts: Facts) -> tuple[int, int, list[str]]:
    """(due, fired exactly once, problems)."""
    found = answers(facts)
    due = [w for w in facts.wakeups if w.due_at is not None and w.due_at <= facts.checked_at]
    problems, once = [], 0
    for wakeup in due:
        carried = len(found.get(wakeup.token, []))
        if carried == 1:
            once += 1
        else:
            problems.append(
                f"{wakeup.token}: shown {carried} times (job {wakeup.state}, "
                f"{wakeup.run_count} runs)"
            )
    return len(due), once, problems


def stuck(facts: Facts) -> list[str]:
    problems = [
        f"inbox {row.token or '?'} still {row.state}"
        for row in facts.inbox
        if row.state in ("pending", "running")
    ]
    if facts.outbox_pending:
        problems.append(f"{facts.outbox_pending} replies still pending in the outbox")
    if facts.jobs_running:
        problems.append(f"{facts.jobs_running} scheduled fires still running")
    return problems


def unexplained_errors(facts: Facts) -> list[str]:
    recorded = {r.id for r in facts.runs if r.error}
    recorded |= {r.run_id for r in facts.inbox if r.error and r.run_id}
    recorded |= {run_id for run_id, _ in facts.outbox_failed if run_id}
    return [
        f"[{line.instance}] {line.event}: {line.text[:200]}"
        for line in facts.logs
        if line.level in ("ERROR", "CRITICAL")
        and (line.run_id is None or line.run_id not in recorded)
    ]


def refusals_shown(bots: Iterable[BotMessage]) -> int:
    return sum(1 for b in bots if any(marker in b.text for marker in REFUSAL_MARKERS))


def contract_refusals(facts: Facts) -> int:
    """Refused runs whose error states the refusal contract's figures."""
    return sum(1 for r in facts.runs if r.status == "refused" and CONTRACT.search(r.error or ""))


@dataclass
class Verdict:
    rows: list[tuple[str, int, str]]
    """(what, how many, what it must be: "" for a plain count)."""
    violations: dict[str, list[str]]

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


def judge(facts: Facts) -> Verdict:
    o = outcomes(facts)
    order, false = out_of_order(facts), false_refusals(facts)
    charged, over = mischarged(facts), overspent(facts)
    due, fired_once, missed = wakeups(facts)
    left, errors = stuck(facts), unexplained_errors(facts)
    rows = [
        ("accepted messages", len(o.accepted), ""),
        ("answered exactly once", len(o.answered_once), ""),
        ("refused (budget)", len(o.refused), ""),
        ("  of them recorded per the refusal contract", contract_refusals(facts), ""),
        ("  refusals shown on the platforms", refusals_shown(facts.bot_messages), ""),
        ("failed and recorded", len(o.failed_recorded), ""),
        ("lost", len(o.lost), "0"),
        ("answered twice", len(o.answered_twice), "0"),
        ("out of order (per conversation)", len(order), "0"),
        ("false budget refusals", len(false), "0"),
        ("users whose used != sum of token logs", len(charged), "0"),
        ("users past allowance by more than a call", len(over), "0"),
        ("wakeups due", due, ""),
        ("wakeups fired exactly once", fired_once, f"{due}"),
        ("inbox/outbox/fires stuck after the drain", len(left), "0"),
        ("ERROR lines without a recorded cause", len(errors), "0"),
    ]
    violations = {
        "lost": o.lost,
        "answered twice": o.answered_twice,
        "out of order": order,
        "false budget refusals": false,
        "mis-charged": charged,
        "overspent": over,
        "wakeups not fired exactly once": missed,
        "stuck after the drain": left,
        "ERROR lines without a recorded cause": errors,
    }
    return Verdict(rows, violations)
