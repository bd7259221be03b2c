"""Skills: instructions (and files) a team writes once, which the agent loads
only when a task needs them.

A skill is a folder with a `SKILL.md`: YAML front matter (`name`, the
folder's name: lowercase letters, digits and hyphens; `description`: what it
is for and when to use it; optionally `personas`, the personas it is offered
in) and a Markdown body, as in Anthropic's Agent Skills (other front matter
keys, such as `license`, are allowed and ignored). Its other files (templates,
references) are read on demand, confined to its folder.

Skills are installed by the operator only: the folders of `[skills] paths`
(default `skills/` beside the config file), read once at start. A skill whose
front matter is invalid is skipped with a WARNING naming its file; a file that
escapes its folder (a symlink out) is left out, and the rest of the skill
loads. `switchboard skills check` reports all of it (`check_skills`).

What a persona gets (`SkillBook.for_persona`): its skills (those whose
`personas` name it, or name none; and, when the persona file lists `skills`,
only those), a section of the system prompt listing them, and the tools
(`bot.tools.skill_tools`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bot.errors import ToolFailed

log = logging.getLogger("switchboard.skills")

SKILL_FILE = "SKILL.md"
MAX_FILES = 200
"""Files of one skill listed (and readable) at most."""
MAX_FILE_BYTES = 1_000_000
_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*\r?$\n?", re.DOTALL | re.MULTILINE)


class SkillFront(BaseModel):
    """The front matter of a `SKILL.md`."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    description: str = Field(min_length=1, max_length=1024)
    personas: tuple[str, ...] | None = None

    @field_validator("description")
    @classmethod
    def _one_line(cls, value: str) -> str:
        text = " ".join(value.split())
        if not text:
            raise ValueError("is empty")
        return text

    @field_validator("personas", mode="before")
    @classmethod
    def _listed(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value


class SkillInvalid(Exception):
    """A `SKILL.md` that cannot be used: the message says why."""


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    body: str
    folder: Path
    personas: tuple[str, ...] | None = None
    files: tuple[str, ...] = ()
    """Its other files, as paths inside its folder ("/"-separated), sorted."""
    escaping: tuple[str, ...] = ()
    """Entries of its folder that lead out of it (symlinks): never read."""

    def offered_in(self, persona: str) -> bool:
        return self.personas is None or persona in self.personas

    def read(self, path: str) -> str:
        """One of its files, as text; raises `ToolFailed` for a path outside
        its folder (`..`, absolute, a symlink out) or a file it does not have."""
        text = path.strip().replace("\\", "/")
        pure = PurePosixPath(text)
        if not text or pure.is_absolute() or re.match(r"^[A-Za-z]:", text):
            raise ToolFailed(f"absolute path refused, give one inside the skill's folder: {path!r}")
        if ".." in pure.parts:
            raise ToolFailed(f"{path!r}: paths may not leave the skill's folder")
        root = self.folder.resolve()
        target = (self.folder / pure).resolve()
        if not target.is_relative_to(root):
            raise ToolFailed(f"{path!r}: leads out of the skill's folder; not read")
        relative = target.relative_to(root).as_posix()
        if relative not in self.files:
            listed = ", ".join(self.files) or "none"
            raise ToolFailed(f"{self.name} has no file {path!r} (its files: {listed})")
        if target.stat().st_size > MAX_FILE_BYTES:
            raise ToolFailed(f"{path!r} is over {MAX_FILE_BYTES:,} bytes; not read")
        try:
            return target.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ToolFailed(f"{path!r} is not a text file") from None


def parse_skill(path: Path) -> Skill:
    """The skill whose `SKILL.md` is `path`; raises `SkillInvalid`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillInvalid(f"cannot read: {exc}") from None
    found = _FRONT.match(text)
    if found is None:
        raise SkillInvalid("no front matter (a '---' block with name and description first)")
    try:
        data = yaml.safe_load(found.group(1))
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0]
        hint = " (quote a value holding ': ')" if "mapping values" in first else ""
        raise SkillInvalid(f"front matter is not valid YAML: {first}{hint}") from None
    if not isinstance(data, dict):
        raise SkillInvalid("front matter is not a mapping of keys to values")
    try:
        front = SkillFront.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"]) or "(front matter)"
        raise SkillInvalid(f"{key}: {error['msg'].removeprefix('Value error, ')}") from None
    folder = path.parent
    if front.name != folder.name:
        raise SkillInvalid(f"name: {front.name!r} is not the folder's name {folder.name!r}")
    body = text[found.end() :].strip()
    if not body:
        raise SkillInvalid("the body (after the front matter) is empty")
    files, escaping = _files(folder)
    return Skill(front.name, front.description, body, folder, front.personas, files, escaping)


def _files(folder: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the skill's files, the entries leading out of its folder)."""
    root = folder.resolve()
    files: list[str] = []
    escaping: list[str] = []
    for current, dirs, names in os.walk(folder):
        here = Path(current)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for entry in [*dirs, *names]:
            path = here / entry
            relative = path.relative_to(folder).as_posix()
            if not path.resolve().is_relative_to(root):
                escaping.append(relative)
                if entry in dirs:
                    dirs.remove(entry)  # (os.walk does not follow it anyway)
            elif entry in names and not entry.startswith(".") and relative != SKILL_FILE:
                files.append(relative)
    return tuple(sorted(files)[:MAX_FILES]), tuple(sorted(escaping))


@dataclass(frozen=True, slots=True)
class Problem:
    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def scan(paths: Iterable[Path]) -> tuple[list[Skill], list[Problem]]:
    """Every skill of `paths` (one folder per skill), and what is wrong: the
    skills that cannot be used (skipped) and the files left out of the rest."""
    skills: list[Skill] = []
    problems: list[Problem] = []
    seen: dict[str, Path] = {}
    for root in paths:
        if not root.is_dir():
            problems.append(Problem(root, "skills folder not found"))
            continue
        for folder in sorted(
            p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
        ):
            path = folder / SKILL_FILE
            if not path.is_file():
                problems.append(Problem(folder, f"no {SKILL_FILE}: not a skill"))
                continue
            try:
                skill = parse_skill(path)
            except SkillInvalid as exc:
                problems.append(Problem(path, f"{exc}; skipped"))
                continue
            if skill.name in seen:
                problems.append(
                    Problem(path, f"a skill named {skill.name!r} is in {seen[skill.name]}; skipped")
                )
                continue
            seen[skill.name] = folder
            skills.append(skill)
            problems += [
                Problem(folder / entry, "leads out of the skill's folder; left out")
                for entry in skill.escaping
            ]
    return skills, problems


def load_skills(paths: Iterable[Path], *, required: bool = False) -> list[Skill]:
    """The skills of `paths`, each problem logged as a WARNING naming its file
    (a missing folder only when `required`: the default one may be absent)."""
    skills, problems = scan(paths)
    for problem in problems:
        if required or problem.reason != "skills folder not found":
            log.warning("skills.problem %s", problem)
    if skills:
        log.info("skills.loaded count=%d", len(skills))
    return skills


def check_skills(
    paths: Iterable[Path], personas: Sequence[str]
) -> tuple[list[Skill], list[Problem]]:
    """`switchboard skills check`: `scan`, and skills offered to personas that
    do not exist."""
    skills, problems = scan(paths)
    known = set(personas)
    for skill in skills:
        unknown = sorted(set(skill.personas or ()) - known)
        if unknown:
            problems.append(
                Problem(
                    skill.folder / SKILL_FILE, f"personas: no persona named {', '.join(unknown)}"
                )
            )
    return skills, problems
