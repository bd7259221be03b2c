"""deploy/compose.yaml: the bot built from deploy/Dockerfile next to
PostgreSQL 16; its database URL, volumes, health checks and secrets wired up."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import make_url

from bot.config import SECRET_ENV, load_settings
from tests.deploy.files import COMPOSE, DEPLOY, dockerfile_env, dockerfile_one, dockerfile_volumes
from tests.paths import REPO_ROOT

INTERPOLATION = re.compile(r"\$\{(\w+)(?::?[?-][^}]*)?\}")


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return loaded


def service(name: str) -> dict[str, Any]:
    found: dict[str, Any] = compose()["services"][name]
    return found


def mounts(svc: dict[str, Any]) -> dict[str, str]:
    """Container path → named volume."""
    pairs = [entry.split(":")[:2] for entry in svc.get("volumes", [])]
    return {target: source for source, target in pairs}


def variable(value: str) -> str:
    """`${NAME:?message}` → NAME (compose reads it from deploy/.env)."""
    match = INTERPOLATION.fullmatch(value)
    assert match, f"{value!r} is not a ${{VARIABLE}} from .env"
    return match.group(1)


def test_postgres_16_keeps_its_data_on_a_volume_and_has_a_health_check() -> None:
    db = service("postgres")
    assert db["image"] == "postgres:16"
    volume = mounts(db)["/var/lib/postgresql/data"]
    assert volume in compose()["volumes"]
    check = db["healthcheck"]["test"]
    assert "pg_isready" in " ".join(check)
    assert f"-U {db['environment']['POSTGRES_USER']}" in " ".join(check)


def test_the_bot_is_the_image_and_waits_for_a_healthy_database() -> None:
    bot = service("bot")
    assert (DEPLOY / bot["build"]["context"]).resolve() == REPO_ROOT
    assert bot["build"]["dockerfile"] == "deploy/Dockerfile"
    assert bot["depends_on"]["postgres"]["condition"] == "service_healthy"
    # The image's HEALTHCHECK (GET /healthz) stays in force.
    assert "healthcheck" not in bot or not bot["healthcheck"].get("disable")
    published = [str(port).rsplit(":", 1)[-1] for port in bot["ports"]]
    assert published == dockerfile_one("EXPOSE").split()


def test_the_bot_uses_postgres_by_service_name_with_the_password_from_the_env() -> None:
    db, bot = service("postgres"), service("bot")
    url = make_url(bot["environment"]["SWITCHBOARD__DATABASE__URL"])
    assert url.drivername == "postgresql+asyncpg"
    assert url.host == "postgres"
    assert url.username == db["environment"]["POSTGRES_USER"]
    assert url.database == db["environment"]["POSTGRES_DB"]
    assert url.password is None  # asyncpg takes it from PGPASSWORD: no secret in settings
    password = variable(db["environment"]["POSTGRES_PASSWORD"])
    assert variable(bot["environment"]["PGPASSWORD"]) == password


def test_the_bot_settings_load_with_the_compose_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    bot = service("bot")
    env = {**dockerfile_env(), **bot["environment"]}
    settings = load_settings(environ=env)
    assert settings.database.url.startswith("postgresql+asyncpg://switchboard@postgres:")
    assert settings.server.host == "0.0.0.0"
    # The spool (turns waiting for the database) is on the bot's volume.
    (volume,) = dockerfile_volumes()
    assert volume in mounts(bot)
    assert settings.inbox.spool_path is not None
    assert settings.inbox.spool_path.parent == Path(volume)


def test_secrets_come_from_an_uncommitted_env_file() -> None:
    bot = service("bot")
    env_file = bot["env_file"]
    assert env_file == ".env"
    env_path = (DEPLOY / env_file).relative_to(REPO_ROOT)
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "--no-index", str(env_path)], cwd=REPO_ROOT, timeout=30
    )
    assert ignored.returncode == 0, f"{env_path} is not in .gitignore"
    dockerignore = (REPO_ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert "**/.env" in dockerignore
    # The example lists every secret the bot reads, empty.
    example = (DEPLOY / "env.example").read_text(encoding="utf-8")
    assigned = dict(
        line.split("=", 1) for line in example.splitlines() if line and not line.startswith("#")
    )
    assert set(SECRET_ENV.values()) <= set(assigned)
    assert not any(assigned.values())
