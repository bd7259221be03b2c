"""deploy/Dockerfile: the install is the README's, its settings load into what
the container needs, and its HEALTHCHECK command probes a running service."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from bot.config import load_settings
from tests.conftest import TEST_API_KEY, Database
from tests.deploy.files import (
    dockerfile_all,
    dockerfile_env,
    dockerfile_one,
    dockerfile_volumes,
    exec_form,
    pip_install_args,
    readme_section,
    shell_lines,
)
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.slack import FakeSlack
from tests.paths import REPO_ROOT
from tests.service_rig import Service, free_port, service_env

OPERATING = REPO_ROOT / "docs" / "operating.md"


def readme_installs() -> list[list[str]]:
    """The installs the README's Operating section shows, and its systemd
    steps (docs/operating.md)."""
    text = readme_section("Operating") + OPERATING.read_text(encoding="utf-8")
    return [pip_install_args(line) for line in shell_lines(text) if "pip install" in line]


def test_the_image_installs_the_project_exactly_as_the_readme_does() -> None:
    readme = readme_installs()
    assert len(readme) >= 2, readme  # the README's Operating section, and the systemd steps
    assert all(args == readme[0] for args in readme), readme  # plain, venv, systemd alike
    (image,) = [pip_install_args(run) for run in dockerfile_all("RUN") if "pip install" in run]
    assert image == readme[0]
    # One install of the project (".[extras]") with every platform's extra.
    (target,) = image
    assert target.startswith(".[")
    extras = set(target[2:-1].split(","))
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    optional = project["project"]["optional-dependencies"]
    assert extras <= set(optional)
    wanted = {name for name in optional if name not in ("all", "dev")}
    covered = set().union(*(_expand(extra, optional) for extra in extras))
    assert covered >= wanted, wanted - covered


def _expand(extra: str, optional: dict[str, list[str]]) -> set[str]:
    names = {extra}
    for requirement in optional[extra]:
        if requirement.startswith("switchboard["):
            names |= set(requirement[len("switchboard[") : -1].split(","))
    return names


def test_the_image_is_slim_python_matching_the_project_and_runs_unprivileged() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    minimum = project["project"]["requires-python"].removeprefix(">=")
    base = dockerfile_one("FROM")
    assert base.startswith("python:") and base.endswith("-slim"), base
    version = base.removeprefix("python:").removesuffix("-slim")
    assert tuple(map(int, version.split("."))) >= tuple(map(int, minimum.split(".")))
    assert dockerfile_one("USER") not in ("root", "0")
    assert exec_form(dockerfile_one("CMD")) == ["switchboard", "run"]


def test_the_image_settings_put_the_data_on_the_volume_and_serve_on_every_interface(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no config.toml: built-in defaults + the image's env
    settings = load_settings(environ=dockerfile_env())
    (volume,) = dockerfile_volumes()
    database = make_url(settings.database.url)
    assert database.drivername == "sqlite+aiosqlite"
    assert database.database is not None
    assert Path(database.database).parent == Path(volume)
    assert settings.inbox.spool_path is not None
    assert settings.inbox.spool_path.parent == Path(volume)
    assert settings.server.host == "0.0.0.0"
    assert [str(settings.server.port)] == dockerfile_one("EXPOSE").split()


def test_the_healthcheck_probes_healthz_on_the_server_port() -> None:
    command = exec_form(dockerfile_one("HEALTHCHECK"))
    assert command[0] == "python"  # no curl in the slim image
    assert "/healthz" in command[-1] and "SWITCHBOARD__SERVER__PORT" in command[-1]
    assert "127.0.0.1" in command[-1]


def _probe(command: list[str], port: int) -> int:
    env = {**dockerfile_env(), "SWITCHBOARD__SERVER__PORT": str(port)}
    return subprocess.run(
        [sys.executable, *command[1:]], env=env, capture_output=True, timeout=30
    ).returncode


@pytest.mark.e2e
async def test_the_healthcheck_passes_on_a_running_service_and_fails_once_it_stops(
    tmp_path: Path,
) -> None:
    command = exec_form(dockerfile_one("HEALTHCHECK"))
    image_env = dockerfile_env()
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        port = free_port()
        env = service_env(Database("sqlite", tmp_path), model, slack, port)
        # The image's settings, with its /data volume moved under tmp_path.
        env.update(
            {
                key: value.replace("/data/", f"{tmp_path}/")
                for key, value in image_env.items()
                if key.startswith("SWITCHBOARD__")
            }
        )
        env["SWITCHBOARD__SERVER__PORT"] = str(port)
        assert str(make_url(env["SWITCHBOARD__DATABASE__URL"]).database).startswith(str(tmp_path))
        service = Service(env, tmp_path, port)
        await service.start()
        try:
            assert _probe(command, port) == 0, service.log_text
        finally:
            assert await service.stop() == 0
        assert _probe(command, port) != 0
