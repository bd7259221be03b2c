"""Persona files: validation, sync into the DB, and the resolution cascade."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import select

from bot.errors import ConfigError
from bot.personas import PersonaBook, PersonaRecord, load_persona_dir, sync_personas
from bot.store import Store
from bot.store.models import Persona


def write(directory: Path, name: str, toml: str, md: str | None = None) -> None:
    (directory / f"{name}.toml").write_text(toml)
    if md is not None:
        (directory / f"{name}.md").write_text(md)


@pytest.fixture
def persona_dir(tmp_path: Path) -> Path:
    write(tmp_path, "default", 'name = "default"\nis_default = true\n', "Be helpful.")
    write(
        tmp_path,
        "tg",
        'name = "tg"\nplatform = "telegram"\nmodel = "claude-haiku-5-5"\ntools = ["core"]\n'
        'prompt = "Telegram voice."\n',
    )
    write(
        tmp_path,
        "acme",
        'name = "acme"\nplatform = "discord"\nserver_id = "G1"\nprompt = "Acme voice."\n',
    )
    write(tmp_path, "dc", 'name = "dc"\nplatform = "discord"\nprompt = "Discord voice."\n')
    return tmp_path


def test_cascade_server_then_platform_then_default(persona_dir: Path):
    book = PersonaBook(record for record, _ in load_persona_dir(persona_dir))
    assert book.resolve("discord", "G1").name == "acme"
    assert book.resolve("discord", "G2").name == "dc"
    assert book.resolve("discord", None).name == "dc"
    assert book.resolve("telegram", None).name == "tg"
    assert book.resolve("slack", "T1").name == "default"
    assert book.resolve("slack", "T1", chosen="acme").name == "acme"  # a channel's choice
    tg = book.resolve("telegram", None)
    assert (tg.model, tg.tool_modules, tg.prompt) == (
        "claude-haiku-5-5",
        ("core",),
        "Telegram voice.",
    )
    assert book.resolve("slack", None).prompt == "Be helpful."  # from the sibling .md


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"a": 'name = "a"\nprompt = "x"\n'}, "exactly one persona must have is_default"),
        (
            {"a": 'name = "a"\nis_default = true\nprompt = "x"\ncolour = "red"\n'},
            "a.toml: colour: unknown key",
        ),
        ({"a": 'name = "a"\nis_default = true\n'}, "a.toml: prompt: no inline prompt"),
        (
            {"a": 'name = "a"\nis_default = true\nprompt = "x"\nmax_tokens = 0\n'},
            "a.toml: max_tokens",
        ),
        ({"a": 'name = "a" is_default'}, "a.toml: invalid TOML"),
        (
            {"a": 'name = "a"\nis_default = true\nprompt = "x"\nserver_id = "1"\n'},
            "server_id needs platform",
        ),
        (
            {
                "a": 'name = "a"\nis_default = true\nprompt = "x"\n',
                "b": 'name = "b"\nplatform = "slack"\nprompt = "x"\n',
                "c": 'name = "c"\nplatform = "slack"\nprompt = "x"\n',
            },
            "both claim platform=slack",
        ),
    ],
)
def test_bad_persona_files_are_clear_config_errors(tmp_path: Path, files, expected):  # type: ignore[no-untyped-def]
    for name, toml in files.items():
        write(tmp_path, name, toml)
    with pytest.raises(ConfigError, match=expected):
        load_persona_dir(tmp_path)


async def test_sync_upserts_and_deactivates(persona_dir: Path, store: Store):
    await sync_personas(store, persona_dir)
    (persona_dir / "dc.toml").unlink()
    write(persona_dir, "tg", 'name = "tg"\nplatform = "telegram"\nprompt = "New voice."\n')
    book = await sync_personas(store, persona_dir)

    async with store.read() as session:
        rows = {p.name: p for p in (await session.exec(select(Persona))).all()}
    assert set(rows) == {"default", "tg", "acme", "dc"}
    assert rows["dc"].active is False and rows["tg"].prompt == "New voice."
    assert book.resolve("discord", None).name == "default"


def test_the_shipped_personas_are_valid():
    from bot.config import PersonaSettings

    records = [r for r, _ in load_persona_dir(PersonaSettings().dir)]
    assert any(r.is_default for r in records)
    assert all(isinstance(r, PersonaRecord) and r.prompt for r in records)
