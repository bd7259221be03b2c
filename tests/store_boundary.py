"""The store's machinery stays inside `bot/store/` (`make lint` runs this).

Two rules for every module of `bot/` outside `bot/store/`; the imports of the
store's internals (rows, drivers, group commit, kept connections, ...) are
import-linter's contract in pyproject.toml:

- no `wait=` keyword: a held-back write (`wait=False`) is how a storage
  operation of `bot/store/` saves a round trip, not something its callers do.
  Allowed by name: APScheduler's `shutdown(wait=False)`.
- no `is_sqlite`: which database runs is the store's business; a difference
  between them belongs inside a storage operation (or a property of the
  Store that says what it means, not which database it is).

Each finding is printed as `file:line: what, what to do instead`; the exit
status is 1 when there is one, or when an `ALLOWED` entry no longer matches
(the list only shrinks).

    python -m tests.store_boundary [ROOT]
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.paths import REPO_ROOT

STORE = "bot/store/"
WAIT_ALLOWED_CALLS = frozenset({"shutdown"})
"""Calls whose `wait=` is not ours: APScheduler's `scheduler.shutdown(wait=False)`."""

ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {
        ("bot/pipeline/hand_back.py", "is_sqlite"),
        ("bot/pipeline/hand_back.py", "wait"),
        ("bot/pipeline/intake.py", "wait"),
        ("bot/pipeline/turns.py", "wait"),
    }
)
"""Violations not moved into `bot/store/` yet, as (file, rule): each one named,
to be removed when its module asks a storage operation instead."""

_ADVICE = {
    "wait": (
        "`wait=` (a held-back write) outside bot/store: add or call a named storage "
        "operation of bot/store that holds its writes back itself"
    ),
    "is_sqlite": (
        "`is_sqlite` outside bot/store: put the SQLite/PostgreSQL difference inside a "
        "storage operation of bot/store, or ask the Store what it means (e.g. `joins`)"
    ),
}


@dataclass(frozen=True, slots=True)
class Finding:
    path: str
    line: int
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {_ADVICE[self.rule]}"


def check_source(path: str, source: str) -> list[Finding]:
    """The rules' findings in one module's source (`path` as printed)."""
    if path.startswith(STORE):
        return []
    return sorted(
        {Finding(path, line, rule) for line, rule in _violations(ast.parse(source))},
        key=lambda f: (f.line, f.rule),
    )


def _violations(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee(node.func) not in WAIT_ALLOWED_CALLS:
            for keyword in node.keywords:
                if keyword.arg == "wait":
                    yield keyword.value.lineno, "wait"
        elif (isinstance(node, ast.Attribute) and node.attr == "is_sqlite") or (
            isinstance(node, ast.Name) and node.id == "is_sqlite"
        ):
            yield node.lineno, "is_sqlite"


def _callee(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def check_tree(root: Path, allowed: frozenset[tuple[str, str]] = ALLOWED) -> list[str]:
    """Every problem under `root`/bot: findings not allowed, and allowed
    entries that no longer match anything."""
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    for file in sorted((root / "bot").rglob("*.py")):
        path = file.relative_to(root).as_posix()
        for finding in check_source(path, file.read_text(encoding="utf-8")):
            if (finding.path, finding.rule) in allowed:
                seen.add((finding.path, finding.rule))
            else:
                problems.append(str(finding))
    for path, rule in sorted(allowed - seen):
        problems.append(f"{path}: no `{rule}` left: remove it from ALLOWED in {__name__}")
    return problems


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else REPO_ROOT
    problems = check_tree(root)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
