"""The tree keeps showing the architecture: few modules directly in bot/, no
module too long to read (the import contracts are checked by `make lint`)."""

from __future__ import annotations

from tests.paths import REPO_ROOT

MAX_TOP_LEVEL_MODULES = 12
MAX_LINES = 700
LONG_LINES = 500
LONG_SAYS_WHY = "Over 500 lines:"
"""A module may pass `LONG_LINES` (never `MAX_LINES`) when splitting it would cut
one concept in two; its docstring says so, beginning a sentence with this."""


def test_bot_has_few_top_level_modules() -> None:
    modules = sorted(p.name for p in (REPO_ROOT / "bot").glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, modules


def test_no_module_is_over_the_line_limit() -> None:
    long = {
        str(path.relative_to(REPO_ROOT)): n
        for package in ("bot", "adapters")
        for path in (REPO_ROOT / package).rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, long


def test_a_long_module_says_why_it_is_one_concept() -> None:
    unexplained = [
        str(path.relative_to(REPO_ROOT))
        for package in ("bot", "adapters")
        for path in (REPO_ROOT / package).rglob("*.py")
        if len(text := path.read_text(encoding="utf-8").splitlines()) > LONG_LINES
        and LONG_SAYS_WHY not in _docstring("\n".join(text))
    ]
    assert not unexplained, unexplained


def _docstring(source: str) -> str:
    import ast

    return ast.get_docstring(ast.parse(source)) or ""


def test_every_bot_package_says_what_it_is_for() -> None:
    packages = [p for p in (REPO_ROOT / "bot").iterdir() if (p / "__init__.py").exists()]
    undocumented = [
        p.name
        for p in packages
        if not (p / "__init__.py").read_text(encoding="utf-8").lstrip().startswith('"""')
    ]
    assert len(packages) >= 10
    assert not undocumented
