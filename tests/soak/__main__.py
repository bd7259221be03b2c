"""`python -m tests.soak` (`make soak`): see tests/soak/runner.py for the
environment it reads. Exit 1 on any violation."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from tests.soak import report
from tests.soak.runner import run_variant, variants


def main() -> int:
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print(__doc__)
        from tests.soak import runner

        print(runner.__doc__)
        return 0
    minutes = float(os.environ.get("SOAK_MINUTES") or 10)
    seed = int(os.environ.get("SOAK_SEED") or random.randrange(1, 10**6))
    which = (os.environ.get("SOAK_DATABASE") or "both").strip().lower()
    if which not in ("postgres", "sqlite", "both"):
        print(f"SOAK_DATABASE must be postgres, sqlite or both, not {which!r}", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S")
    directory = Path(
        os.environ.get("SOAK_DIR") or tempfile.mkdtemp(prefix=f"switchboard-soak-{stamp}-")
    )
    print(f"soak: {minutes:g} min, seed {seed} (SOAK_SEED={seed} replays it), in {directory}")
    failed = False
    for variant in variants(minutes, seed, which, directory):
        started = time.monotonic()
        ok, data, shown = asyncio.run(run_variant(variant))
        data["wall_seconds"] = round(time.monotonic() - started, 1)
        path = directory / f"report-{variant.name}.json"
        report.write(path, data)
        print(f"\n{shown}\nJSON report: {path} ({data['wall_seconds']:g} s)\n", flush=True)
        failed |= not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
