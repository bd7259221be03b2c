"""Start-up benchmark (`make bench`): how long the commands people type first
take to answer. Prints figures; asserts nothing.

- version: `switchboard --version`, wall time, beside the floor of starting
  the interpreter at all (`python -c pass`).
- chat: `switchboard chat` on a pseudo-terminal (stdin and stdout a TTY, as a
  person runs it) against the fake Messages API: the time until the `you>`
  prompt is on the terminal (ready for input), and until the first reply is
  (the line typed as soon as the prompt appeared). Once on a fresh database
  (its schema created on the way), then on the same database again (the usual
  start), each repeated and reported as median and best.

Each figure is a fresh process; the machine is shared, so read the medians
beside the floor of the same run, never alone.

    python -m tests.benchmarks.startup [--runs 5]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

from tests.cli.test_e2e_terminal import child_env
from tests.conftest import TEST_API_KEY
from tests.fakes.anthropic import FakeAnthropic
from tests.paths import REPO_ROOT

PROMPT = b"you>"
LIMIT_S = 60.0


def switchboard() -> list[str]:
    """`switchboard` as `python -m bot` run in the tree of this file (what the
    console script runs, and so an older tree measures as itself)."""
    return [sys.executable, "-m", "bot"]


def wall(args: list[str], env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, env=env, cwd=REPO_ROOT)
    return time.perf_counter() - started


class Timed:
    """A child on a pseudo-terminal; `until(needle)` reads its output until
    `needle` appears and returns the seconds since the child was started."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=REPO_ROOT
        )
        os.close(slave)
        self.output = bytearray()

    def until(self, needle: bytes) -> float:
        searched = 0
        deadline = self.started + LIMIT_S
        while needle not in self.output[searched:]:
            searched = max(0, len(self.output) - len(needle))
            left = deadline - time.perf_counter()
            if left <= 0 or not select.select([self.master], [], [], left)[0]:
                raise RuntimeError(f"{needle!r} did not appear: {bytes(self.output)[-500:]!r}")
            data = os.read(self.master, 65536)
            if b"\x1b[6n" in data:  # the prompt asks where the cursor is
                os.write(self.master, b"\x1b[1;1R")
            self.output.extend(data)
        return time.perf_counter() - self.started

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self) -> None:
        """Ctrl-D, then read what is left until the child is gone."""
        self.type(b"\x04")
        deadline = time.perf_counter() + LIMIT_S
        try:
            while time.perf_counter() < deadline:
                if select.select([self.master], [], [], 0.1)[0]:
                    data = os.read(self.master, 65536)
                    if b"\x1b[6n" in data:
                        os.write(self.master, b"\x1b[1;1R")
                elif self.proc.poll() is not None:
                    return
        except OSError:  # EIO: the child closed the terminal
            return
        finally:
            self.proc.kill()
            self.proc.wait()
            os.close(self.master)


def chat_once(fake: FakeAnthropic, db: Path) -> tuple[float, float]:
    """(seconds until the prompt, seconds until the first reply) of one start."""
    env = child_env(fake, db, TERM="xterm-256color")
    child = Timed([*switchboard(), "chat"], env)
    try:
        ready = child.until(PROMPT)
        child.output.clear()
        child.type(b"hello there\r")
        replied = child.until(b"echo: hello there")
    finally:
        child.close()
    return ready, replied


def figures(samples: list[float]) -> str:
    return f"median {statistics.median(samples):5.2f} s  best {min(samples):5.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = max(1, args.runs)
    floor = [wall([sys.executable, "-c", "pass"]) for _ in range(runs)]
    version = [wall([*switchboard(), "--version"]) for _ in range(runs)]
    print(f"start-up ({runs} runs each, wall time from the process's start)")
    print(f"  python -c pass            {figures(floor)}  (the floor)")
    print(f"  switchboard --version     {figures(version)}")
    directory = Path(tempfile.mkdtemp(prefix="startup-bench-"))
    try:
        with FakeAnthropic(api_key=TEST_API_KEY) as fake:
            fresh = [chat_once(fake, directory / f"fresh-{n}.sqlite") for n in range(runs)]
            chat_once(fake, directory / "again.sqlite")  # its schema, once
            again = [chat_once(fake, directory / "again.sqlite") for _ in range(runs)]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    for name, samples in (("fresh database", fresh), ("existing database", again)):
        print(f"  switchboard chat, {name}:")
        print(f"    ready for input         {figures([ready for ready, _ in samples])}")
        print(f"    first reply on screen   {figures([replied for _, replied in samples])}")


if __name__ == "__main__":
    main()
