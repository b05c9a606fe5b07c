"""Unit tests of the scheduler (aipaas.scheduler)."""
