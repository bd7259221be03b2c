"""deploy/switchboard.service: its commands are real `switchboard` commands (run
as subprocesses, the upgrade for real), and the unit is confined to its data."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot.config import InboxSettings
from tests.deploy.files import unit
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.e2e  # runs the installed `switchboard` script

SWITCHBOARD = Path(sys.executable).parent / "switchboard"  # the installed console script


def service() -> dict[str, list[str]]:
    return unit()["Service"]


def command(key: str) -> list[str]:
    (line,) = service()[key]
    argv = shlex.split(line)
    assert Path(argv[0]).name == "switchboard", argv
    assert Path(argv[0]).is_absolute()
    return argv[1:]


def switchboard(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(
        [str(SWITCHBOARD), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_the_unit_commands_are_switchboard_subcommands(tmp_path: Path) -> None:
    assert command("ExecStartPre")[:2] == ["db", "upgrade"]
    assert command("ExecStart")[:1] == ["run"]
    for key in ("ExecStartPre", "ExecStart"):
        args = command(key)
        subcommand = [word for word in args if not word.startswith("-") and "/" not in word]
        result = switchboard([*args, "--help"], tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"usage: switchboard {' '.join(subcommand)} ")


def test_the_upgrade_before_start_creates_the_database_in_the_working_directory(
    tmp_path: Path,
) -> None:
    config = tmp_path / "etc" / "config.toml"
    config.parent.mkdir()
    shutil.copy(REPO_ROOT / "config.example.toml", config)
    workdir = tmp_path / "var-lib-switchboard"
    workdir.mkdir()
    (unit_config,) = {w for w in command("ExecStartPre") if w.endswith("config.toml")}
    args = [str(config) if word == unit_config else word for word in command("ExecStartPre")]
    result = switchboard(args, workdir)
    assert result.returncode == 0, result.stderr
    assert (workdir / "data" / "switchboard.db").exists()


def test_the_unit_runs_unprivileged_and_writes_only_its_data_directory() -> None:
    svc = service()
    (user,) = svc["User"]
    assert user not in ("root", "0")
    assert svc["Restart"] == ["on-failure"]
    assert svc["NoNewPrivileges"] == ["yes"]
    assert svc["ProtectSystem"] == ["strict"]
    (workdir,) = svc["WorkingDirectory"]
    writable = " ".join(svc["ReadWritePaths"]).split()
    assert workdir in writable
    assert svc["EnvironmentFile"], "secrets come from an EnvironmentFile"
    # SIGTERM drains running work: systemd must wait longer than the drain.
    (stop,) = svc["TimeoutStopSec"]
    assert int(stop) > InboxSettings().drain_seconds
    assert unit()["Install"]["WantedBy"] == ["multi-user.target"]
