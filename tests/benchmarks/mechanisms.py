"""What each speed mechanism saves through the front door (`make bench`, issue
52 item 3): the front-door closed loop (`tests.benchmarks.frontdoor`) against
one service per variant, all in the same run: every mechanism on, the plain
path (`[database] fast_path = false`), and each mechanism off alone
(`bot.store.mechanisms`, or its config key). Prints a table, asserts nothing.

Every process (the minimal bot and one service per variant) is started at
once, each on a database of its own; after a warm-up each, `--rounds` windows
of each process in turn, so that a slow spell of a shared machine falls on all
alike. Per variant: CPU per message and its change against all on (a
mechanism saves what turning it off adds), the ratio to the minimal bot's CPU,
latency p50 and messages/s. Keep a mechanism only if it saves >= 10 % of a
message's CPU or wall.

    python -m tests.benchmarks.mechanisms [--database sqlite|postgres]
        [--messages 200] [--in-flight 4] [--rounds 3]

PostgreSQL needs SWITCHBOARD_TEST_POSTGRES_URL; its services run with a pool
of 4 (+4), the same for all, so that they fit the server's connections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from bot.store.mechanisms import ENV as OFF
from tests.benchmarks.frontdoor import MINIMAL_BOT, Figures, Loop, Window, answer
from tests.conftest import POSTGRES_URL, TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic, last_user_text, text_reply
from tests.fakes.slack import FakeSlack
from tests.service_rig import Service, free_port, service_env

ALL_ON = "all on"
PLAIN = "plain path"

VARIANTS: dict[str, dict[str, dict[str, str]]] = {
    "sqlite": {
        ALL_ON: {},
        PLAIN: {"SWITCHBOARD__DATABASE__FAST_PATH": "false"},
        "no group commit": {"SWITCHBOARD__DATABASE__GROUP_COMMIT": "false"},
        "no early lease": {OFF: "early_lease"},
        "no caches": {OFF: "caches"},
        "no statement plans": {OFF: "plans"},
        "no one-hop driver": {OFF: "sqlite_driver"},
    },
    "postgres": {
        ALL_ON: {},
        PLAIN: {"SWITCHBOARD__DATABASE__FAST_PATH": "false"},
        "no early lease": {OFF: "early_lease"},
        "no caches": {OFF: "caches"},
        "no statement plans": {OFF: "plans"},
        "no kept connections": {OFF: "kept"},
        "no keeping pool": {OFF: "keeping_pool"},
    },
}
"""Per database: each variant's settings (environment of its process)."""

PG_POOL = {"SWITCHBOARD__DATABASE__POOL_SIZE": "4", "SWITCHBOARD__DATABASE__MAX_OVERFLOW": "4"}


@dataclass
class Variant:
    name: str
    loop: Loop
    windows: list[Window]


@contextlib.asynccontextmanager
async def databases(backend: str, names: list[str], tmp: Path) -> AsyncIterator[list[Database]]:
    made: list[Database] = []
    try:
        for n, _ in enumerate(names):
            path = tmp / f"v{n}"
            path.mkdir()
            db = Database(backend, path)
            await db.create()
            made.append(db)
        yield made
    finally:
        for db in made:
            await db.drop()


async def run(database: str, messages: int, in_flight: int, rounds: int) -> None:
    variants = VARIANTS[database]
    names = [MINIMAL_BOT, *variants]
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            databases(database, names, Path(tmp)) as dbs,
            FakeAnthropic(api_key=TEST_API_KEY) as model,
            FakeSlack() as slack,
        ):
            model.responder = lambda body: text_reply(answer(last_user_text(body)))
            loops = []
            for n, (name, db) in enumerate(zip(names, dbs, strict=True)):
                port = free_port()
                extra = {} if name == MINIMAL_BOT else variants[name]
                env = service_env(
                    db,
                    model,
                    slack,
                    port,
                    SWITCHBOARD__LOGGING__LEVEL="WARNING",
                    SWITCHBOARD__INBOX__LEASE_SECONDS="20",  # the defaults, not the tests'
                    SWITCHBOARD__INBOX__SWEEP_SECONDS="5",
                    MINIMAL_BOT_DB=str(Path(tmp) / f"v{n}" / "minimal.db"),
                    **(PG_POOL if database == "postgres" else {}),
                    **extra,
                )
                module, ready = (MINIMAL_BOT, "/healthz") if n == 0 else ("bot", "/readyz")
                process = Service(env, Path(tmp), port, module=module, ready_path=ready)
                loops.append(Variant(name, Loop(process, (model, slack), in_flight, f"V{n}"), []))
            try:
                for v in loops:
                    await v.loop.process.start()
                for v in loops:
                    await v.loop.window(max(5, messages // in_flight // 10))  # warm-up
                per_dm = max(1, messages // rounds // in_flight)
                for _ in range(rounds):
                    for v in loops:
                        v.windows.append(await v.loop.window(per_dm))
            except TimeoutError:
                for v in loops:
                    print(v.name, v.loop.process.log_text)
                raise
            finally:
                for v in loops:
                    await v.loop.process.stop()
    report(database, in_flight, rounds, loops)


def report(database: str, in_flight: int, rounds: int, variants: list[Variant]) -> None:
    figures = {v.name: Figures.of(v.windows) for v in variants}
    floor, on = figures.pop(MINIMAL_BOT), figures[ALL_ON]
    print(
        f"mechanisms: {on.messages} Slack DMs per variant, {in_flight} in flight, "
        f"{database}, {rounds} rounds; change against all on (+: the mechanism saves it)"
    )
    print(
        f"  {'variant':22} {'CPU ms/msg':>10} {'vs all on':>9} {'× minimal':>9} "
        f"{'p50 ms':>8} {'vs all on':>9} {'msgs/s':>7}"
    )
    for name, f in figures.items():
        cpu = (f.cpu_ms / on.cpu_ms - 1) * 100
        wall = (f.p50_ms / on.p50_ms - 1) * 100
        print(
            f"  {name:22} {f.cpu_ms:10.2f} {cpu:+8.1f}% {f.cpu_ms / floor.cpu_ms:8.2f}× "
            f"{f.p50_ms:8.1f} {wall:+8.1f}% {f.rate:7.1f}"
        )
    print(
        f"  {'minimal bot':22} {floor.cpu_ms:10.2f} {'':9} {1:8.2f}× {floor.p50_ms:8.1f} "
        f"{'':9} {floor.rate:7.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--messages", type=int, default=200, help="per variant")
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.database == "postgres":
        assert POSTGRES_URL, "set SWITCHBOARD_TEST_POSTGRES_URL"
    asyncio.run(run(args.database, args.messages, args.in_flight, args.rounds))


if __name__ == "__main__":
    main()
