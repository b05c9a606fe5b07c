"""Persistence: SQLAlchemy 2 Core on SQLite (embedded default) or PostgreSQL; alembic."""

from aipaas.store.store import Store, TokenRecord
from aipaas.store.tasks import TaskRecord, TaskRepository

__all__ = ["Store", "TaskRecord", "TaskRepository", "TokenRecord"]
