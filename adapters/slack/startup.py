"""What a Slack start needs to say clearly: which answers mean a rejected
token and what to check, and a bolt logger without bolt's noise."""

from __future__ import annotations

import logging

TOKEN_REJECTED = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "not_allowed_token_type",
    }
)
"""Slack's answers that mean the token itself is wrong."""
TOKEN_HINTS = {
    "SLACK_BOT_TOKEN": "Check SLACK_BOT_TOKEN: the app's Bot User OAuth Token (xoxb-...).",
    "SLACK_APP_TOKEN": (
        "Check SLACK_APP_TOKEN: an app-level token (xapp-...) with connections:write."
    ),
}


class QuietTokenNotice(logging.Filter):
    """Bolt reads SLACK_BOT_TOKEN from the environment by itself, then warns on
    every start that it uses our client instead ("`token` will be unused"): a
    warning about nothing, dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "`token` will be unused" not in record.getMessage()


def bolt_logger(name: str) -> logging.Logger:
    """The bolt app's own logger (a name of its own: bolt resets its level)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, QuietTokenNotice) for f in logger.filters):
        logger.addFilter(QuietTokenNotice())
    return logger
