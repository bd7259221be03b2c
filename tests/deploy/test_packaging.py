"""A non-editable install, as `pip install '.[all]'` does in the image and the
systemd example (CI tests an editable one): the wheel works outside the
checkout, with its migrations and default personas, and builds without the
license deprecation warning."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

pytestmark = pytest.mark.e2e

PROJECT = ["pyproject.toml", "README.md", "bot", "adapters", "migrations", "personas"]


def python(args: list[str], site: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_installed_wheel_upgrades_a_database_and_finds_its_personas(tmp_path: Path) -> None:
    source, wheels, site, elsewhere = (tmp_path / n for n in ("src", "wheels", "site", "run"))
    source.mkdir()
    elsewhere.mkdir()
    for name in PROJECT:  # what the image gets (tests, caches and local files stay out)
        if (REPO_ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(REPO_ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy(REPO_ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip"]
    built = subprocess.run(
        [*pip, "wheel", "-v", "--no-deps", "--wheel-dir", str(wheels), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert "license` as a TOML table is deprecated" not in built.stdout + built.stderr
    (wheel,) = wheels.glob("switchboard-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith("/METADATA")))
    assert b"License-Expression: LicenseRef-Proprietary" in metadata

    installed = subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    where = python(["-c", "import bot; print(bot.__file__)"], site, elsewhere)
    assert where.stdout.strip() == str(site / "bot" / "__init__.py"), where.stderr

    personas = python(["-m", "bot", "personas", "list"], site, elsewhere)
    assert personas.returncode == 0, personas.stderr
    assert "default (default)" in personas.stdout
    upgraded = python(["-m", "bot", "db", "upgrade"], site, elsewhere)
    assert upgraded.returncode == 0, upgraded.stderr
    assert (elsewhere / "data" / "switchboard.db").exists()
