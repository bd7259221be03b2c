"""Shared fixtures: databases (SQLite always, PostgreSQL when
SWITCHBOARD_TEST_POSTGRES_URL is set), the fake Anthropic API and a wired App.

Which tests run on both databases: those whose subject is storage, i.e. the
tests under `BOTH_DATABASES` (the store, the pipeline's writes, accounts and
budgets, scheduling, the admin pages' SQL) and any module or test marked
`both_databases` (it writes through the store in a way that differs between
SQLite and PostgreSQL). Every other test that takes `database` (or `store`,
`make_app`) runs on SQLite only: formatting, commands, adapters, tools and
rendering gain nothing from a second database, whose own paths the tests above
already cover. Tests of PostgreSQL itself take `pg`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from bot.app import App
from bot.config import Secrets, Settings
from bot.store import Store, compat
from tests.fakes.anthropic import FakeAnthropic
from tests.migrated import Migrated
from tests.migrated import make as make_migrated

POSTGRES_URL = os.environ.get("SWITCHBOARD_TEST_POSTGRES_URL")
FAST_PATH = os.environ.get("SWITCHBOARD_TEST_FAST_PATH", "1") != "0"
"""SWITCHBOARD_TEST_FAST_PATH=0: every Store of the tests runs the plain path
(`bot.store.compat`), the services they start too; tests of the fast path's
own mechanisms (marked `fast_path`) are skipped."""
if not FAST_PATH:
    compat.force_plain("SWITCHBOARD_TEST_FAST_PATH=0")
TEST_API_KEY = "sk-ant-test-0123456789abcdef"

pytest_plugins = ["tests.tiers"]  # the tiers: e2e, slow, perf (and the rule that keeps them)

BACKENDS = [
    "sqlite",
    pytest.param(
        "postgres",
        marks=[
            pytest.mark.postgres,
            pytest.mark.skipif(not POSTGRES_URL, reason="SWITCHBOARD_TEST_POSTGRES_URL not set"),
        ],
    ),
]


BOTH_DATABASES = ("store", "pipeline", "accounts", "scheduling", "web/admin")
"""Directories under tests/ whose tests run on SQLite and PostgreSQL."""


def runs_on_both_databases(definition: pytest.Function) -> bool:
    if definition.get_closest_marker("both_databases") is not None:
        return True
    tests = definition.config.rootpath / "tests"
    return any(definition.path.is_relative_to(tests / where) for where in BOTH_DATABASES)


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """SQLite only for a test outside `BOTH_DATABASES` (the module docstring):
    a `parametrize` mark takes precedence over the `database` fixture's params."""
    if "database" in metafunc.fixturenames and not runs_on_both_databases(metafunc.definition):
        only = pytest.mark.parametrize("database", ["sqlite"], indirect=True)
        metafunc.definition.add_marker(only)


class Database:
    """A fresh, empty database for one test: a SQLite file or a PostgreSQL schema."""

    def __init__(self, backend: str, tmp_path: Path) -> None:
        self.backend = backend
        self.schema: str | None = None
        if backend == "sqlite":
            self.url = f"sqlite+aiosqlite:///{tmp_path / 'test.db'}"
        else:
            assert POSTGRES_URL
            self.url = POSTGRES_URL
            self.schema = f"t_{secrets.token_hex(6)}"

    async def create(self) -> None:
        if self.schema:
            engine = create_async_engine(self.url)
            async with engine.begin() as conn:
                await conn.execute(text(f'CREATE SCHEMA "{self.schema}"'))
            await engine.dispose()

    async def drop(self) -> None:
        if self.schema:
            engine = create_async_engine(self.url)
            async with engine.begin() as conn:
                await conn.execute(text(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'))
            await engine.dispose()

    def store(self, **options: Any) -> Store:
        return Store(self.url, schema=self.schema, **options)

    def settings_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"url": self.url}
        if self.schema:
            data["schema_name"] = self.schema
        return data


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Migrated:
    """Databases the migrations made, once per test process (tests/migrated.py)."""
    return make_migrated(tmp_path_factory.mktemp("migrated"), POSTGRES_URL)


@pytest.fixture(params=BACKENDS)
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(request.param, tmp_path)
    await db.create()
    try:
        yield db
    finally:
        await db.drop()


@pytest.fixture
async def pg(tmp_path: Path) -> AsyncIterator[Database]:
    """A fresh PostgreSQL schema, for tests that need PostgreSQL itself (they
    skip without SWITCHBOARD_TEST_POSTGRES_URL)."""
    if not POSTGRES_URL:
        pytest.skip("SWITCHBOARD_TEST_POSTGRES_URL not set")
    db = Database("postgres", tmp_path)
    await db.create()
    try:
        yield db
    finally:
        await db.drop()


@pytest.fixture
async def sqlite_database(tmp_path: Path) -> Database:
    return Database("sqlite", tmp_path)


@pytest.fixture
async def store(database: Database, migrated: Migrated) -> AsyncIterator[Store]:
    await migrated.into(database)
    store = database.store()
    await store.upgrade()
    try:
        yield store
    finally:
        await store.dispose()


@pytest.fixture
async def fake_anthropic() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=TEST_API_KEY) as fake:
        yield fake


@pytest.fixture
def fake_anthropic_thread() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(api_key=TEST_API_KEY) as fake:
        yield fake


def make_settings(database: Database, fake: FakeAnthropic, /, **sections: Any) -> Settings:
    data: dict[str, Any] = {
        "database": {**database.settings_data(), **sections.pop("database", {})},
        "llm": {"base_url": fake.base_url, "max_retries": 0, **sections.pop("llm", {})},
    }
    data.update(sections)
    return Settings.model_validate(data)


AppFactory = Callable[..., Any]


@pytest.fixture
async def make_app(
    database: Database, fake_anthropic: FakeAnthropic, migrated: Migrated
) -> AsyncIterator[AppFactory]:
    """Build and open an App on the test database, talking to the fake API."""
    apps: list[App] = []
    await migrated.into(database)

    async def factory(*, tools: Any = (), clock: Any = None, **sections: Any) -> App:
        app = App(
            make_settings(database, fake_anthropic, **sections),
            Secrets(anthropic_api_key=TEST_API_KEY),  # type: ignore[arg-type]
            extra_tools=tools,
            **({"clock": clock} if clock is not None else {}),
        )
        await app.open()
        apps.append(app)
        return app

    yield factory
    for app in apps:
        await app.close(drain_timeout=1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FAST_PATH:
        return
    skip = pytest.mark.skip(reason="a fast path mechanism (SWITCHBOARD_TEST_FAST_PATH=0)")
    for item in items:
        if item.get_closest_marker("fast_path"):
            item.add_marker(skip)
