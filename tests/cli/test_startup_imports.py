"""A command imports what it needs when it needs it (structure, not time: the
figures are in `make bench`, tests/benchmarks/startup.py). Each check runs in
a fresh interpreter and reads its `sys.modules`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import TEST_API_KEY
from tests.fakes.anthropic import FakeAnthropic
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.slow

HEAVY = ("anthropic", "bot.app", "bot.store", "sqlalchemy", "pydantic", "aiohttp", "jinja2")
"""What `--version` and `--help` need none of (each is tenths of a second to import)."""


def modules_after(code: str, **env: str) -> dict[str, bool]:
    """Run `code` in a fresh interpreter; it prints a JSON object as its last line."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **env},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    loaded: dict[str, bool] = json.loads(result.stdout.splitlines()[-1])
    return loaded


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["chat", "--help"]])
def test_version_and_help_import_neither_the_app_nor_its_libraries(argv: list[str]):
    loaded = modules_after(
        f"""
        import json, sys
        from bot.cli import main
        try:
            main({argv!r})
        except SystemExit:
            pass
        heavy = {HEAVY!r}
        print(json.dumps({{name: name in sys.modules for name in heavy}}))
        """
    )
    assert not [name for name, present in loaded.items() if present]


def test_the_chat_is_ready_before_the_sdk_and_without_the_admin_pages(tmp_path: Path):
    """`switchboard chat`'s app opens without importing the model's SDK (it
    loads once started, in the background) and never imports the admin
    dashboard, which only `/admin` needs."""
    with FakeAnthropic(api_key=TEST_API_KEY) as fake:
        loaded = modules_after(
            """
            import asyncio, json, sys
            from bot.app import App
            from bot.config import Secrets, Settings

            async def main():
                app = App(Settings(), Secrets.from_env(), provider_in_background=True)
                await app.open()
                try:
                    opened = {name: name in sys.modules for name in ("anthropic", "bot.web.admin")}
                    app.provider.start()
                    await app.provider.ready()
                    return {**opened, "anthropic later": "anthropic" in sys.modules}
                finally:
                    await app.close()

            print(json.dumps(asyncio.run(main())))
            """,
            ANTHROPIC_API_KEY=TEST_API_KEY,
            SWITCHBOARD__LLM__BASE_URL=fake.base_url,
            SWITCHBOARD__DATABASE__URL=f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}",
        )
    assert loaded == {"anthropic": False, "bot.web.admin": False, "anthropic later": True}
