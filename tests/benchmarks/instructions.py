"""CPU work per message counted in instructions (`make bench`). Prints figures;
asserts nothing.

Timed figures on a shared machine move by a tenth from one run to the next,
more than most changes to the hot path. Instructions executed do not: under
valgrind's callgrind the same work counts the same within about one percent,
whatever else the machine is doing. So the sequential workload of
`tests.benchmarks.pipeline` (SQLite, the model answering at once) runs here
under callgrind twice, with `--low` and with `--high` messages after the same
warm-up, and the difference divided by the messages between them is what one
message costs, start-up left out; the same for the minimal durable bot
(`tests.benchmarks.floors`), and the ratio of the two.

Instructions are not time: what the kernel does (each SQLite commit's
writes) and waits on memory are not in them, so a change that saves system
calls shows in the timed figures, not here. Without valgrind it says so and
stops.

    python -m tests.benchmarks.instructions [--low 40] [--high 240]
    python -m tests.benchmarks.instructions --run service|floor --messages N  (one run, as
        callgrind is given it)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WARM_UP = 100
"""Messages before the ones counted, in both runs."""
_COLLECTED = re.compile(r"Collected : (\d+)")


async def _service(url: str, messages: int) -> None:
    from bot.accounts import budgets, identity
    from bot.store import memories
    from tests.benchmarks.pipeline import msg, open_app

    # Under callgrind a message takes a hundred times as long: what expires
    # with time (the caches of accounts, limits and "no memories", a measure
    # of the loop's lag standing for the next messages) would expire within
    # the count, as it does not in the timed run of the same messages.
    identity.CACHE_TTL_S = budgets.LIMIT_CACHE_TTL_S = memories.NO_MEMORIES_TTL_S = 1e9
    app, _, _ = await open_app(url, 0.0)
    app.pipeline._admission.lag.fresh = 1e9
    for i in range(WARM_UP):
        await app.pipeline.handle(msg(-i - 1, i % 50))
    gc.collect()
    for i in range(messages):
        await app.pipeline.handle(msg(i, i % 50))
    await app.close()


async def _floor(url: str, messages: int) -> None:
    from tests.benchmarks.floors import minimal_bot

    async with minimal_bot(url, None) as one:
        for i in range(WARM_UP):
            await one(-i - 1)
        gc.collect()
        for i in range(messages):
            await one(i)


def _counted(workload: str, messages: int, directory: Path) -> int:
    """Instructions callgrind counted for one run of `workload`."""
    url = f"sqlite+aiosqlite:///{directory / f'{workload}-{messages}.db'}"
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-m",
            "tests.benchmarks.instructions",
            "--run",
            workload,
            "--messages",
            str(messages),
            "--url",
            url,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{workload} under callgrind failed:\n{done.stderr[-2000:]}")
    return collected(done.stderr)


def collected(report: str) -> int:
    """The instructions valgrind's report (its stderr) says callgrind counted."""
    found = _COLLECTED.search(report)
    if found is None:
        raise ValueError(f"no count in valgrind's report: {report[-500:]!r}")
    return int(found[1])


def per_message(workload: str, low: int, high: int, directory: Path) -> float:
    """Instructions one message of `workload` costs: two runs at once (two cores)."""
    with ThreadPoolExecutor(2) as pool:
        fewer, more = pool.map(lambda n: _counted(workload, n, directory), (low, high))
    return (more - fewer) / (high - low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--low", type=int, default=40)
    parser.add_argument("--high", type=int, default=240)
    parser.add_argument("--run", choices=["service", "floor"], help=argparse.SUPPRESS)
    parser.add_argument("--messages", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run is not None:
        work = _service if args.run == "service" else _floor
        asyncio.run(work(args.url, args.messages))
        return
    if shutil.which("valgrind") is None:
        print("instructions: skipped (valgrind not installed)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        service = per_message("service", args.low, args.high, Path(tmp))
        floor = per_message("floor", args.low, args.high, Path(tmp))
    print(f"instructions (SQLite, sequential, callgrind): {args.high - args.low} messages counted")
    ratio = service / floor
    print(f"  per message  {service / 1e6:8.2f} M  (floor {floor / 1e6:.2f} M: {ratio:.1f}×)")


if __name__ == "__main__":
    main()
