"""`make help` and `make clean`, run with make itself."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.paths import REPO_ROOT

MAKEFILE = REPO_ROOT / "Makefile"


def targets() -> list[str]:
    return re.findall(r"^([a-z][a-z_-]*):", MAKEFILE.read_text(encoding="utf-8"), re.M)


def test_make_help_lists_every_target_with_its_description() -> None:
    result = subprocess.run(
        ["make", "-s", "help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    listed: dict[str, str] = {}
    for line in result.stdout.splitlines():
        make, target, description = line.split(None, 2)
        assert make == "make"
        listed[target] = description.strip()
    assert sorted(listed) == sorted(targets())
    assert all(listed.values()), listed


def test_every_target_is_phony() -> None:
    (phony,) = re.findall(r"^\.PHONY:(.*)$", MAKEFILE.read_text(encoding="utf-8"), re.M)
    assert sorted(phony.split()) == sorted(targets())


def test_make_clean_removes_the_venv_caches_and_build_output(tmp_path: Path) -> None:
    shutil.copy(MAKEFILE, tmp_path / "Makefile")
    junk = [
        ".venv",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        "bot/__pycache__",
        "tests/cli/__pycache__",
        "switchboard.egg-info",
        "build",
        "dist",
    ]
    kept = [
        "bot/__init__.py",
        "tests/cli/test_x.py",
        "config.toml",
        "data/switchboard.db",
        ".git/HEAD",
    ]
    for name in [f"{directory}/x" for directory in junk] + kept:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    result = subprocess.run(
        ["make", "-s", "clean"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert [name for name in junk if (tmp_path / name).exists()] == []
    assert [name for name in kept if not (tmp_path / name).exists()] == []
