"""Slack adapter (slack-bolt `AsyncApp`): Socket Mode or the HTTP Events API,
replies rendered as Slack mrkdwn. `parse_event` / `parse_command` are pure."""

from adapters.slack.adapter import SlackAdapter, create_adapter
from adapters.slack.parse import parse_command, parse_event
from adapters.slack.render import render

__all__ = ["SlackAdapter", "create_adapter", "parse_command", "parse_event", "render"]
