"""The README lists everything a person can type: every chat command the
running service registers (read from an opened App, as the platforms read
them) and every verb of the `switchboard` command line (the argparse tree).
A command or verb added without its line in the README fails here."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from bot.app import App
from bot.cli import build_parser
from bot.config import Secrets
from tests.conftest import TEST_API_KEY, Database, make_settings
from tests.fakes.anthropic import FakeAnthropic
from tests.paths import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
LONGEST = 340
"""Lines the README may have: about 300 (issue 58: read top to bottom in ten
minutes), and room for a compact section or two; detail goes to docs/."""


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def verbs(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[str]:
    """Every leaf command of the parser: "run", "admin budget", "jobs pause", ..."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        yield " ".join(path)
    for group in groups:
        for name, sub in group.choices.items():
            yield from verbs(sub, (*path, name))


def test_every_cli_verb_is_in_the_readme() -> None:
    listed = section("The command line")
    found = list(verbs(build_parser()))
    assert "admin instances" in found and "jobs pause" in found  # the walk reaches the leaves
    missing = [v for v in found if not re.search(rf"^switchboard {v}\b", listed, re.M)]
    assert not missing, f"README's 'The command line' does not list: {missing}"


async def test_every_chat_command_is_in_the_readme(
    sqlite_database: Database, fake_anthropic: FakeAnthropic
) -> None:
    app = App(
        make_settings(sqlite_database, fake_anthropic),
        Secrets(anthropic_api_key=TEST_API_KEY),  # type: ignore[arg-type]
    )
    await app.open()
    try:
        names = [info.name for info in app.pipeline.command_infos()]
    finally:
        await app.close(drain_timeout=1)
    assert {"help", "confirm", "cancel", "pending", "stop"} <= set(names)
    table = section("In a chat")
    missing = [n for n in names if not re.search(rf"^\| `/{n}\b", table, re.M)]
    assert not missing, f"README's 'In a chat' table does not list: {missing}"


def test_the_readme_stays_short_and_keeps_a_tests_section() -> None:
    assert len(README.splitlines()) <= LONGEST, "move detail to docs/ or ARCHITECTURE.md"
    assert "make test" in section("Tests")


def test_the_readme_s_links_to_files_lead_somewhere() -> None:
    for target in re.findall(r"\]\(((?!https?:|#)[^)#]+)", README):
        assert (REPO_ROOT / target).exists(), target
    for doc in (REPO_ROOT / "docs").glob("*.md"):
        for target in re.findall(r"\]\(((?!https?:|#)[^)#]+)", doc.read_text(encoding="utf-8")):
            assert (doc.parent / target).exists(), f"{doc.name}: {target}"
