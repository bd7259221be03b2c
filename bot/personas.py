"""Personas: TOML files (+ Markdown prompt) in `personas/`, synced into the DB
at start, resolved per message: channel choice → server → platform → default.
"""

from __future__ import annotations

import hashlib
import logging
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy.exc import IntegrityError
from sqlmodel import select

from bot.errors import ConfigError
from bot.store import Store
from bot.store.models import Persona
from bot.types import utcnow

log = logging.getLogger("switchboard.personas")


class PersonaFile(BaseModel):
    """The schema of one persona TOML file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    platform: str | None = None
    server_id: str | None = None
    is_default: bool = False
    model: str | None = None
    """"provider/model", or a bare name (the built-in provider); unset: `[llm] model`."""
    fallback: tuple[str, ...] | None = None
    """This persona's fallback chain; unset: `[llm] fallback`."""
    max_tokens: int | None = Field(default=None, ge=1)
    tools: tuple[str, ...] | None = None
    """Allowed tool modules; omitted means every module."""
    prompt: str | None = None
    prompt_file: str | None = None
    heartbeat_minutes: float | None = Field(default=None, ge=1)
    """Wake up this often in active conversations (see `bot.scheduling.heartbeat`)."""
    heartbeat_prompt: str | None = None
    """The heartbeat's instruction; default: follow up if needed, else NO_REPLY."""

    @model_validator(mode="after")
    def _scope(self) -> PersonaFile:
        if self.server_id is not None and self.platform is None:
            raise ValueError("server_id needs platform")
        if self.prompt is not None and self.prompt_file is not None:
            raise ValueError("give either prompt or prompt_file, not both")
        return self


@dataclass(frozen=True, slots=True)
class PersonaRecord:
    name: str
    prompt: str
    platform: str | None = None
    server_id: str | None = None
    is_default: bool = False
    model: str | None = None
    max_tokens: int | None = None
    tool_modules: tuple[str, ...] | None = None
    description: str = ""
    heartbeat_minutes: float | None = None
    heartbeat_prompt: str | None = None
    fallback: tuple[str, ...] | None = None
    source: str = field(default="", repr=False, compare=False)
    """The file it was read from (named when its model is refused)."""


def load_persona_dir(directory: Path) -> list[tuple[PersonaRecord, Path]]:
    """Read and validate every `*.toml` in `directory`. Raises `ConfigError`."""
    if not directory.is_dir():
        raise ConfigError(f"{directory}: persona directory not found (personas.dir)")
    loaded = [(_load_file(path), path) for path in sorted(directory.glob("*.toml"))]
    _check_set([record for record, _ in loaded], directory)
    return loaded


def _load_file(path: Path) -> PersonaRecord:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    try:
        spec = PersonaFile.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"]) or "(file)"
        problem = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        raise ConfigError(f"{path}: {key}: {problem.removeprefix('Value error, ')}") from None
    prompt = spec.prompt
    if prompt is None:
        prompt_path = path.parent / (spec.prompt_file or f"{path.stem}.md")
        try:
            prompt = prompt_path.read_text(encoding="utf-8")
        except OSError:
            raise ConfigError(
                f"{path}: prompt: no inline prompt and cannot read {prompt_path.name}"
            ) from None
    if not prompt.strip():
        raise ConfigError(f"{path}: prompt: is empty")
    return PersonaRecord(
        name=spec.name,
        prompt=prompt.strip(),
        platform=spec.platform,
        server_id=spec.server_id,
        is_default=spec.is_default,
        model=spec.model,
        max_tokens=spec.max_tokens,
        tool_modules=spec.tools,
        description=spec.description,
        heartbeat_minutes=spec.heartbeat_minutes,
        heartbeat_prompt=spec.heartbeat_prompt,
        fallback=spec.fallback,
        source=str(path),
    )


def _check_set(records: Sequence[PersonaRecord], directory: Path) -> None:
    defaults = [r.name for r in records if r.is_default]
    if len(defaults) != 1:
        found = ", ".join(defaults) or "none"
        raise ConfigError(
            f"{directory}: exactly one persona must have is_default = true (found: {found})"
        )
    seen_names: set[str] = set()
    seen_scopes: dict[tuple[str, str | None], str] = {}
    for record in records:
        if record.name in seen_names:
            raise ConfigError(f"{directory}: two personas are named {record.name!r}")
        seen_names.add(record.name)
        if record.platform is not None:
            scope = (record.platform, record.server_id)
            if scope in seen_scopes:
                raise ConfigError(
                    f"{directory}: personas {seen_scopes[scope]!r} and {record.name!r} "
                    f"both claim platform={scope[0]} server_id={scope[1]}"
                )
            seen_scopes[scope] = record.name


class PersonaBook:
    """The active personas, in memory (they only change at start)."""

    def __init__(self, records: Iterable[PersonaRecord]) -> None:
        self._by_name = {r.name: r for r in records}
        self._by_scope = {
            (r.platform, r.server_id): r for r in self._by_name.values() if r.platform
        }
        defaults = [r for r in self._by_name.values() if r.is_default]
        if not defaults:
            raise ConfigError("no default persona")
        self.default = defaults[0]

    def resolve(
        self, platform: str, server_id: str | None, chosen: str | None = None
    ) -> PersonaRecord:
        """Channel choice → server-specific → platform-specific → default."""
        if chosen and chosen in self._by_name:
            return self._by_name[chosen]
        if server_id is not None and (platform, server_id) in self._by_scope:
            return self._by_scope[(platform, server_id)]
        return self._by_scope.get((platform, None), self.default)

    def get(self, name: str) -> PersonaRecord | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def models(self) -> list[str]:
        """Every model the personas name (their own and their fallbacks)."""
        named = [[r.model or "", *(r.fallback or ())] for r in self._by_name.values()]
        return [m for models in named for m in models if m]


async def sync_personas(store: Store, directory: Path) -> PersonaBook:
    """Load persona files, upsert them into the DB, deactivate removed ones.
    Instances starting together race to insert the same rows: the loser of the
    unique constraint reads them again and finds nothing left to do."""
    loaded = load_persona_dir(directory)
    for attempt in range(3):
        try:
            await _upsert(store, loaded)
            break
        except IntegrityError:
            if attempt == 2:
                raise
            log.info("personas.sync_raced: another instance wrote them first; again")
    log.info("personas.synced count=%d dir=%s", len(loaded), directory)
    return PersonaBook(record for record, _ in loaded)


async def _upsert(store: Store, loaded: list[tuple[PersonaRecord, Path]]) -> None:
    async with store.write() as session:
        existing = {p.name: p for p in (await session.exec(select(Persona))).all()}
        for record, path in loaded:
            digest = _digest(record)
            row = existing.pop(record.name, None)
            if row is None:
                row = Persona(
                    name=record.name, prompt=record.prompt, source_path="", content_hash=""
                )
            elif row.content_hash == digest and row.active:
                continue
            row.platform, row.server_id = record.platform, record.server_id
            row.is_default, row.model = record.is_default, record.model
            row.max_tokens, row.prompt = record.max_tokens, record.prompt
            row.tool_modules = list(record.tool_modules) if record.tool_modules else None
            row.source_path, row.content_hash = str(path), digest
            row.active, row.updated_at = True, utcnow()
            session.add(row)
        for gone in existing.values():
            if gone.active:
                gone.active = False
                gone.is_default = False
                session.add(gone)
                log.info("persona.deactivated name=%s (file removed)", gone.name)


def _digest(record: PersonaRecord) -> str:
    return hashlib.sha256(repr(record).encode()).hexdigest()
