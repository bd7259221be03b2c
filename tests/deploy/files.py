"""Readers for the deployment files, for the tests in this package: the
Dockerfile's instructions, the README's install command, the systemd unit."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from tests.paths import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "compose.yaml"
UNIT = DEPLOY / "switchboard.service"
README = REPO_ROOT / "README.md"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def dockerfile() -> list[Instruction]:
    """Instructions in order, continuation lines joined, comments dropped."""
    joined: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends in a continuation line"
    instructions = []
    for line in joined:
        keyword, _, args = line.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip()))
    return instructions


def dockerfile_all(keyword: str) -> list[str]:
    return [i.args for i in dockerfile() if i.keyword == keyword]


def dockerfile_one(keyword: str) -> str:
    (args,) = dockerfile_all(keyword)
    return args


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for args in dockerfile_all("ENV"):
        for pair in shlex.split(args):
            key, sep, value = pair.partition("=")
            assert sep, f"ENV {pair}: use the KEY=value form"
            env[key] = value
    return env


def dockerfile_volumes() -> list[str]:
    args = dockerfile_one("VOLUME")
    return exec_form(args) if args.startswith("[") else args.split()


def exec_form(args: str) -> list[str]:
    """A CMD/HEALTHCHECK in JSON (exec) form, options before it dropped."""
    command: list[str] = json.loads(args[args.index("[") :])
    return command


def pip_install_args(command: str) -> list[str]:
    """What follows `pip install` in a shell command (one of `&&`-joined parts)."""
    for part in command.split("&&"):
        words = shlex.split(part)
        for i in range(len(words) - 1):
            if words[i].endswith("pip") and words[i + 1] == "install":
                return words[i + 2 :]
    raise AssertionError(f"no pip install in {command!r}")


def readme_section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.M | re.S)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def shell_lines(markdown: str) -> list[str]:
    """The lines of the ```sh blocks, comments stripped."""
    blocks = re.findall(r"^```sh\n(.*?)^```", markdown, re.M | re.S)
    return [
        line.split(" #", 1)[0].strip()
        for block in blocks
        for line in block.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def unit() -> dict[str, dict[str, list[str]]]:
    """The systemd unit: section → key → values (a key may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in UNIT.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, f"{line!r} before any section"
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections
