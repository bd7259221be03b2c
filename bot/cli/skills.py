"""`switchboard skills list | check`: the installed skills (`[skills] paths`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the command uses is imported when it runs (`bot.cli`)
    from bot.config import Secrets, Settings


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    skills = sub.add_parser("skills", parents=[common], help="skills (SKILL.md folders)")
    s_sub = skills.add_subparsers(dest="skills_command", required=True, metavar="ACTION")
    s_sub.add_parser(
        "list", parents=[common], help="the skills, with the personas they are offered in"
    ).set_defaults(func=cmd_skills_list)
    s_sub.add_parser(
        "check", parents=[common], help="validate every skill (exit 1 with the reasons)"
    ).set_defaults(func=cmd_skills_check)


async def cmd_skills_list(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.tools.skills import scan

    skills, problems = scan(settings.skills.paths or ())
    for skill in skills:
        personas = ", ".join(skill.personas) if skill.personas is not None else "every persona"
        files = f", {len(skill.files)} files" if skill.files else ""
        print(f"{skill.name}: {skill.description}  [{personas}{files}] {skill.folder}")
    if not skills:
        print("no skills in " + ", ".join(str(p) for p in settings.skills.paths or ()))
    if problems:
        print(f"({len(problems)} problems: switchboard skills check)")
    return 0


async def cmd_skills_check(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.personas import load_persona_dir
    from bot.tools.skills import check_skills

    personas = [record.name for record, _ in load_persona_dir(settings.personas.dir)]
    skills, problems = check_skills(settings.skills.paths or (), personas)
    for problem in problems:
        print(problem)
    print(f"{len(skills)} skills valid, {len(problems)} problems")
    return 1 if problems else 0
