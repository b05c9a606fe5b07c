"""Unit tests of the store (aipaas.store) on SQLite and PostgreSQL."""
