"""Skills through the real pipeline and the fake model: a skill's description
is in the system prompt and its body reaches the model only after
`load_skill`; 40 skills → search mode; path escapes refused (the rest of the
skill still loads); a broken SKILL.md skipped with a WARNING naming it; the
shared prefix the same for two users; skills per persona; the CLI."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from bot.cli import main
from bot.tools.skill_tools import SkillBook
from bot.tools.skills import scan
from tests.fakes.anthropic import text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message

REPO_SKILLS = Path(__file__).resolve().parents[2] / "skills"
BODY = "Step 1: open the release board. Step 2: tick every box. SECRET-SAUCE-7."


def write_skill(root: Path, name: str, description: str, body: str = BODY, **front: Any) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    extra = "".join(f"{key}: {json.dumps(value)}\n" for key, value in front.items())
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {description}\n{extra}---\n\n{body}\n"
    )
    return folder


def system_text(body: dict[str, Any]) -> str:
    return "\n".join(block["text"] for block in body["system"])


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in body.get("tools", [])]


def last_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in body["messages"][-1]["content"] if b.get("type") == "tool_result"]


async def test_a_skill_is_listed_and_its_body_loaded_only_on_demand(
    make_app, fake_anthropic, tmp_path
):
    folder = write_skill(tmp_path, "release-checklist", "How we ship a release, step by step.")
    (folder / "templates").mkdir()
    (folder / "templates" / "notes.md").write_text("RELEASE NOTES TEMPLATE")
    app = await make_app(skills={"paths": [str(tmp_path)]}, budgets={"guest": "unlimited"})
    app.attach(RecordingAdapter())
    fake_anthropic.script(
        tool_use_reply(tool_call("load_skill", {"name": "release-checklist"})),
        tool_use_reply(
            tool_call(
                "read_skill_file", {"name": "release-checklist", "path": "templates/notes.md"}
            )
        ),
        text_reply("Shipped."),
    )
    await app.pipeline.handle(message("ship the release"))
    first, second, third = (r.body for r in fake_anthropic.requests)
    assert "- release-checklist: How we ship a release, step by step." in system_text(first)
    assert "SECRET-SAUCE-7" not in json.dumps(first)
    assert tool_names(first)[-2:] == ["load_skill", "read_skill_file"]
    assert "skill_search" not in tool_names(first)
    (loaded,) = last_results(second)
    assert "SECRET-SAUCE-7" in loaded["content"] and "templates/notes.md" in loaded["content"]
    assert "<untrusted" not in loaded["content"]  # the operator's text: trusted
    (read,) = last_results(third)
    assert read["content"] == "RELEASE NOTES TEMPLATE" and not read.get("is_error")


async def test_forty_skills_switch_to_search(make_app, fake_anthropic, tmp_path):
    for i in range(39):
        write_skill(tmp_path, f"chore-{i}", f"Routine chore number {i} for the office.")
    write_skill(tmp_path, "release-checklist", "How we ship a release, step by step.")
    app = await make_app(skills={"paths": [str(tmp_path)]}, budgets={"guest": "unlimited"})
    app.attach(RecordingAdapter())
    fake_anthropic.script(
        tool_use_reply(tool_call("skill_search", {"query": "ship a release"})),
        tool_use_reply(tool_call("load_skill", {"name": "release-checklist"})),
        text_reply("Done."),
    )
    await app.pipeline.handle(message("ship it"))
    first, second, third = (r.body for r in fake_anthropic.requests)
    system = system_text(first)
    assert "40 skills are installed" in system and "skill_search(query)" in system
    assert "Routine chore" not in system and "release-checklist" not in system
    assert tool_names(first)[-3:] == ["skill_search", "load_skill", "read_skill_file"]
    (found,) = last_results(second)
    assert found["content"].splitlines()[1].startswith("- release-checklist: How we ship")
    assert "SECRET-SAUCE-7" in last_results(third)[0]["content"]


async def test_paths_out_of_a_skill_are_refused_and_the_rest_loads(
    make_app, fake_anthropic, tmp_path, caplog
):
    secret = tmp_path / "outside.txt"
    secret.write_text("THE-OPERATORS-SECRET")
    root = tmp_path / "skills"
    folder = write_skill(root, "triage", "How we triage a bug.")
    (folder / "guide.md").write_text("GUIDE TEXT")
    (folder / "leak.md").symlink_to(secret)
    (folder / "linked").symlink_to(tmp_path, target_is_directory=True)
    write_skill(root, "other", "Another skill.")
    with caplog.at_level(logging.WARNING, logger="switchboard.skills"):
        app = await make_app(skills={"paths": [str(root)]}, budgets={"guest": "unlimited"})
    assert any("leak.md: leads out of the skill's folder" in r.getMessage() for r in caplog.records)
    app.attach(RecordingAdapter())
    attempts = ["../other/SKILL.md", str(secret), "leak.md", "linked/outside.txt", "nope.md"]
    fake_anthropic.script(
        tool_use_reply(
            *(tool_call("read_skill_file", {"name": "triage", "path": p}) for p in attempts)
        ),
        tool_use_reply(
            tool_call("load_skill", {"name": "triage"}),
            tool_call("read_skill_file", {"name": "triage", "path": "guide.md"}),
        ),
        text_reply("ok"),
    )
    await app.pipeline.handle(message("triage this"))
    refused = last_results(fake_anthropic.requests[1].body)
    assert [r.get("is_error") for r in refused] == [True] * 5
    assert "THE-OPERATORS-SECRET" not in json.dumps([r.body for r in fake_anthropic.requests])
    texts = [r["content"] for r in refused]
    assert "may not leave" in texts[0] and "absolute path refused" in texts[1]
    assert "leads out" in texts[2] and "leads out" in texts[3] and "has no file" in texts[4]
    loaded, guide = last_results(fake_anthropic.requests[2].body)
    assert "Its files (read_skill_file): guide.md" in loaded["content"]
    assert "leak" not in loaded["content"] and guide["content"] == "GUIDE TEXT"


async def test_a_broken_skill_is_skipped_with_a_warning_naming_it(
    make_app, fake_anthropic, tmp_path, caplog
):
    write_skill(tmp_path, "good", "A good skill.")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "SKILL.md").write_text("---\nname: broken\ndescription: [unclosed\n---\nbody\n")
    nameless = tmp_path / "nameless"
    nameless.mkdir()
    (nameless / "SKILL.md").write_text("---\ndescription: no name\n---\nbody\n")
    with caplog.at_level(logging.WARNING, logger="switchboard.skills"):
        app = await make_app(skills={"paths": [str(tmp_path)]}, budgets={"guest": "unlimited"})
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"{broken / 'SKILL.md'}: front matter is not valid YAML" in w for w in warnings)
    assert any(f"{nameless / 'SKILL.md'}: name: Field required" in w for w in warnings)
    app.attach(RecordingAdapter())
    fake_anthropic.script(text_reply("hi"))
    await app.pipeline.handle(message("hi"))
    system = system_text(fake_anthropic.last_request.body)
    assert "- good: A good skill." in system and "broken" not in system


async def test_two_users_of_a_persona_share_the_prefix(make_app, fake_anthropic, tmp_path):
    for i in range(3):
        write_skill(tmp_path, f"skill-{i}", f"Skill number {i}.")
    app = await make_app(skills={"paths": [str(tmp_path)]}, budgets={"guest": "unlimited"})
    app.attach(RecordingAdapter())
    fake_anthropic.script(text_reply("hi Alice"), text_reply("hi Bob"))
    await app.pipeline.handle(message("hi"))
    await app.pipeline.handle(
        message("hi", platform_user_id="bob", user_display_name="Bob", platform_channel_id="b")
    )
    alice, bob = (r.body for r in fake_anthropic.requests)
    assert alice["system"][0] == bob["system"][0] and alice["tools"] == bob["tools"]
    assert "- skill-0: Skill number 0." in alice["system"][0]["text"]
    assert alice["system"][1] != bob["system"][1]  # who is talking: after the shared prefix


def test_skills_per_persona_from_either_side(tmp_path):
    write_skill(tmp_path, "for-all", "Everyone gets it.")
    write_skill(tmp_path, "for-ops", "Ops only.", personas=["ops"])
    skills, problems = scan([tmp_path])
    assert problems == []
    book = SkillBook(skills, inline_max=15)
    assert [s.name for s in book.for_persona("default").skills] == ["for-all"]
    assert [s.name for s in book.for_persona("ops").skills] == ["for-all", "for-ops"]
    assert [s.name for s in book.for_persona("ops", ["for-ops"]).skills] == ["for-ops"]
    assert book.for_persona("default", []).tools == () and book.for_persona("x", []).section == ""


def test_the_shipped_skills_are_valid(tmp_path, capsys):
    config = tmp_path / "config.toml"
    config.write_text(f'[skills]\npaths = ["{REPO_SKILLS}"]\n')
    assert main(["skills", "check", "--config", str(config)]) == 0
    assert "2 skills valid, 0 problems" in capsys.readouterr().out
    assert main(["skills", "list", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "wakeups: Use your own scheduled wakeups well" in out
    assert "weekly-summary: Format a weekly summary" in out and "1 files" in out


def test_check_fails_with_the_reasons(tmp_path, capsys):
    root = tmp_path / "skills"  # the default: beside the config file
    write_skill(root, "fine", "Fine.")
    write_skill(root, "mismatch", "Wrong name.")
    (root / "mismatch" / "SKILL.md").write_text("---\nname: other\ndescription: x\n---\nbody\n")
    write_skill(root, "nobody", "For a persona that does not exist.", personas=["ghost"])
    config = tmp_path / "config.toml"
    config.write_text("")
    assert main(["skills", "check", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "name: 'other' is not the folder's name 'mismatch'" in out
    assert "personas: no persona named ghost" in out
    assert "2 skills valid, 2 problems" in out


@pytest.mark.parametrize("front", ["name: UPPER\ndescription: x", "name: ok\ndescription: ''"])
def test_invalid_front_matter(tmp_path, front):
    folder = tmp_path / ("ok" if "ok" in front else "UPPER")
    folder.mkdir()
    (folder / "SKILL.md").write_text(f"---\n{front}\n---\nbody\n")
    skills, problems = scan([tmp_path])
    assert skills == [] and len(problems) == 1 and "skipped" in problems[0].reason
