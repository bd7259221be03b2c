"""Slack adapter (slack-bolt `AsyncApp`): Socket Mode or the HTTP Events API,
replies rendered as Slack mrkdwn, streamed while written (`streaming.py`).
`parse_event` / `parse_command` are pure."""

from adapters.slack.adapter import SlackAdapter
from adapters.slack.parse import parse_command, parse_event
from adapters.slack.render import render
from bot.config import Secrets, Settings
from bot.errors import ConfigError

__all__ = ["SlackAdapter", "create_adapter", "parse_command", "parse_event", "render"]


def create_adapter(settings: Settings, secrets: Secrets) -> SlackAdapter:
    slack = settings.slack
    bot_token = _secret(secrets, "slack_bot_token", "SLACK_BOT_TOKEN", "xox", "the bot token")
    if slack.mode == "socket":
        app_token = _secret(
            secrets,
            "slack_app_token",
            "SLACK_APP_TOKEN",
            "xapp-",
            'an app-level token for [slack] mode = "socket"',
        )
        return SlackAdapter(slack, bot_token=bot_token, app_token=app_token)
    signing_secret = _secret(
        secrets,
        "slack_signing_secret",
        "SLACK_SIGNING_SECRET",
        "",
        'the signing secret for [slack] mode = "http"',
    )
    return SlackAdapter(slack, bot_token=bot_token, signing_secret=signing_secret)


def _secret(secrets: Secrets, field: str, env: str, prefix: str, what: str) -> str:
    value = getattr(secrets, field)
    text = value.get_secret_value().strip() if value is not None else ""
    if not text:
        raise ConfigError(f"{env} is not set: the Slack adapter needs {what}")
    if prefix and not text.startswith(prefix):
        raise ConfigError(f"{env} does not look like {what} (it should start with {prefix}…)")
    return text
