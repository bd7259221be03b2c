"""End to end: each way the model can fail to answer, through `switchboard chat`
as a subprocess (stdin piped) against the fake Messages API. The person is told
what to do about it (`bot.llm.failures`): the reply goes to stderr, the chat
exits 1, and no secret is in what it prints."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli.test_e2e_chat import run_cli
from tests.conftest import TEST_API_KEY
from tests.fakes.anthropic import FakeAnthropic, overloaded_error, rate_limit_error

WRONG_KEY = "sk-ant-wrong-key-5f3a9c"
NO_RETRIES = {"SWITCHBOARD__LLM__MAX_RETRIES": "0"}


def failed(result: subprocess.CompletedProcess[str]) -> str:
    """The failure's one line: the chat exited 1 having answered nothing."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("Sorry")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def chat_with_one_model(
    tmp_path: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], int]:
    """ "hello" to a Messages API that has only claude-sonnet-5-5; the requests it got."""
    with FakeAnthropic(api_key=TEST_API_KEY, models=["claude-sonnet-5-5"]) as fake:
        result = run_cli(["chat"], "hello\n", fake=fake, db=tmp_path / "db.sqlite", env=env)
        return result, fake.request_count


def test_a_rejected_key_names_its_variable_and_not_try_again(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    result = run_cli(
        ["chat"],
        "hello\n",
        fake=fake_anthropic_thread,
        db=tmp_path / "db.sqlite",
        api_key=WRONG_KEY,
    )
    line = failed(result)
    assert "rejected the API key (401)" in line
    assert "should check the environment variable ANTHROPIC_API_KEY." in line
    assert "try again" not in line.lower()
    assert WRONG_KEY not in result.stderr + result.stdout
    assert fake_anthropic_thread.requests[0].api_key == WRONG_KEY  # the key was sent, and refused


def test_an_unreachable_service_names_the_url_and_its_setting(tmp_path: Path):
    # Nothing listens on port 9: connection refused. The URL's password is never shown.
    result = run_cli(
        ["chat"],
        "hello\n",
        db=tmp_path / "db.sqlite",
        env={"SWITCHBOARD__LLM__BASE_URL": "http://proxy:s3cret@127.0.0.1:9/", **NO_RETRIES},
    )
    line = failed(result)
    assert "could not connect to the AI service at http://127.0.0.1:9." in line
    assert "set llm.base_url to where it runs" in line
    assert "s3cret" not in result.stderr


def test_an_unknown_model_names_it_and_where_it_is_set(tmp_path: Path):
    result, requests = chat_with_one_model(
        tmp_path, {"SWITCHBOARD__LLM__MODEL": "claude-sonet-5-5"}
    )
    line = failed(result)
    assert 'no model called "claude-sonet-5-5"' in line
    assert "It is set in [llm] model:" in line
    assert "try again" not in line.lower()
    assert requests == 1  # a 404 is not retried


def test_a_persona_s_unknown_model_names_the_persona_file(tmp_path: Path):
    personas = tmp_path / "personas"
    personas.mkdir()
    persona = personas / "helper.toml"
    persona.write_text(
        'name = "helper"\nis_default = true\nmodel = "claude-opus-0"\nprompt = "Be brief."\n'
    )
    result, _ = chat_with_one_model(tmp_path, {"SWITCHBOARD__PERSONAS__DIR": str(personas)})
    line = failed(result)
    assert 'no model called "claude-opus-0"' in line
    assert f'the persona "helper" ({persona}: model)' in line


def test_rate_limited_and_overloaded_say_try_again(
    fake_anthropic_thread: FakeAnthropic, tmp_path: Path
):
    fake_anthropic_thread.script(rate_limit_error(retry_after=30), overloaded_error())
    result = run_cli(
        ["chat", "--user", "bob"],
        "one\ntwo\n",
        fake=fake_anthropic_thread,
        db=tmp_path / "db.sqlite",
        env=NO_RETRIES,
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.startswith("Sorry")]
    assert lines == [
        "Sorry, the AI service is limiting how often we may ask just now. "
        "Please try again in about 30 seconds.",
        "Sorry, the AI service is overloaded just now. Please try again in a moment.",
    ]
