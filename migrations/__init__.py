"""Alembic environment and versions (see alembic.ini)."""
