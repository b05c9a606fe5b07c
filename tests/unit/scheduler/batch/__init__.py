"""Unit tests of the batch scheduler (aipaas.scheduler.batch)."""
