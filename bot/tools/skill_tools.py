"""What a persona gets of the skills (`bot.tools.skills`): the system prompt's
section and the tools `load_skill`, `read_skill_file` and, past
`[skills] inline_max` skills, `skill_search`.

With at most `inline_max` skills the persona's prompt lists each one's name
and description (sorted: the same bytes every time, in the cached prefix);
beyond that it lists none and says to search (`skill_search`: term match
over names and descriptions, the same BM25 as `tool_search`, at most five).
The tools are offered to every role, their effect `read`, their output
trusted: the operator wrote the skills.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.errors import ToolFailed
from bot.ports import Tool, ToolContext
from bot.tools.search import MAX_MATCHES, Entry, TermIndex
from bot.tools.skills import Skill
from bot.types import Role

NAME_SCHEMA = {"type": "string", "description": "The skill's name, e.g. 'release-checklist'"}


class _SkillTool:
    min_role = Role.GUEST
    module = "skills"
    effect = "read"
    trusted_output = True
    """The operator installed the skills: their text is not from elsewhere."""

    def __init__(self, skills: Sequence[Skill]) -> None:
        self._skills = {skill.name: skill for skill in skills}

    def _skill(self, args: Mapping[str, Any]) -> Skill:
        name = str(args.get("name") or "").strip()
        skill = self._skills.get(name)
        if skill is None:
            hint = (
                "skill_search finds one"
                if len(self._skills) > 5
                else ("skills: " + ", ".join(sorted(self._skills)))
            )
            raise ToolFailed(f"no skill named {name!r} ({hint})")
        return skill


class LoadSkill(_SkillTool):
    name = "load_skill"
    description = (
        "Load a skill: instructions for a kind of task, written by the operator. Returns "
        "its instructions and the list of its other files (read them with read_skill_file). "
        "Load the skill before doing a task it covers, then follow it."
    )
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {"name": NAME_SCHEMA},
        "required": ["name"],
    }

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        skill = self._skill(args)
        files = (
            "Its files (read_skill_file): " + ", ".join(skill.files)
            if skill.files
            else "It has no other files."
        )
        return f"# Skill: {skill.name}\n\n{skill.body}\n\n{files}"


class ReadSkillFile(_SkillTool):
    name = "read_skill_file"
    description = (
        "Read one of a skill's files (a template, a reference) named by load_skill, by its "
        "path inside the skill's folder."
    )
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "name": NAME_SCHEMA,
            "path": {"type": "string", "description": "e.g. 'templates/summary.md'"},
        },
        "required": ["name", "path"],
    }

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        return self._skill(args).read(str(args.get("path") or ""))


class SkillSearch(_SkillTool):
    name = "skill_search"
    description = (
        "Find skills (instructions for kinds of task, written by the operator) by what the "
        "task is about, in a few words; the best matches (up to 5) come back with their "
        "descriptions. Then load one with load_skill."
    )
    input_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "e.g. 'release checklist'"}},
        "required": ["query"],
    }

    def __init__(self, skills: Sequence[Skill]) -> None:
        super().__init__(skills)
        self._index = TermIndex([Entry(s.name, s.name, s.description) for s in skills])

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        query = str(args.get("query") or "").strip()
        if not query:
            raise ToolFailed("query is required: a few words saying what the task is about")
        found = [self._skills[key] for key, _ in self._index.search(query, MAX_MATCHES)]
        if not found:
            return f"No skill matches {query!r} (of {len(self._skills)}). Try other words."
        lines = [f"- {s.name}: {s.description}" for s in found]
        return f"{len(found)} of {len(self._skills)} skills match:\n" + "\n".join(lines)


@dataclass(frozen=True, slots=True)
class SkillKit:
    """One persona's skills, its prompt section and its tools."""

    skills: tuple[Skill, ...] = ()
    section: str = ""
    tools: tuple[Tool, ...] = ()


def section(skills: Sequence[Skill], inline_max: int) -> str:
    if not skills:
        return ""
    if len(skills) > inline_max:
        return (
            f"Skills: {len(skills)} skills are installed: instructions the operator wrote for "
            "particular kinds of task (procedures, checklists, formats to follow). Before a "
            "task that one may cover, find it with skill_search(query), then load it with "
            "load_skill(name) and follow it."
        )
    lines = "\n".join(f"- {s.name}: {s.description}" for s in skills)
    return (
        "Skills: instructions the operator wrote for particular kinds of task. When a task "
        "matches one, load it with load_skill(name) first and follow it (read_skill_file "
        f"reads the files it names):\n{lines}"
    )


class SkillBook:
    """The installed skills, and each persona's kit (made once)."""

    def __init__(self, skills: Sequence[Skill], inline_max: int = 15) -> None:
        self._skills = sorted(skills, key=lambda s: s.name)
        self._inline_max = inline_max
        self._kits: dict[tuple[str, tuple[str, ...] | None], SkillKit] = {}

    def __len__(self) -> int:
        return len(self._skills)

    def for_persona(self, persona: str, chosen: Sequence[str] | None = None) -> SkillKit:
        """`persona`'s kit; `chosen`: the persona file's `skills` (None: all
        those offered in it)."""
        key = (persona, None if chosen is None else tuple(chosen))
        kit = self._kits.get(key)
        if kit is None:
            kit = self._kits[key] = self._kit(persona, chosen)
        return kit

    def _kit(self, persona: str, chosen: Sequence[str] | None) -> SkillKit:
        skills = tuple(
            s
            for s in self._skills
            if s.offered_in(persona) and (chosen is None or s.name in chosen)
        )
        if not skills:
            return SkillKit()
        tools: list[Tool] = [LoadSkill(skills), ReadSkillFile(skills)]
        if len(skills) > self._inline_max:
            tools.insert(0, SkillSearch(skills))
        return SkillKit(skills, section(skills, self._inline_max), tuple(tools))
