"""Accounts: users and roles, platform links, budgets and usage, the audit log,
and the admin operations shared by slash commands and the CLI."""
