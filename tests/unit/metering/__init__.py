"""Unit tests of metering, budgets and webhooks (aipaas.metering)."""
