"""Slack adapter: replies are rendered as Slack mrkdwn."""

from adapters.slack.render import render

__all__ = ["render"]
