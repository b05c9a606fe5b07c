"""Unit tests of tenants, roles and tokens (aipaas.tenancy)."""
