"""Persistence: SQLAlchemy 2 Core on SQLite (embedded default) or PostgreSQL; alembic.

``Connection`` is the open transaction that callers hand back to the store's methods
(``conn=``); it is named here so that nothing outside store/ imports SQLAlchemy.
"""

from sqlalchemy import Connection

from aipaas.store.store import Store, TokenRecord
from aipaas.store.tasks import TaskRecord, TaskRepository

__all__ = ["Connection", "Store", "TaskRecord", "TaskRepository", "TokenRecord"]
