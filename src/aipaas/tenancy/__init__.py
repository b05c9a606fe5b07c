"""Tenants, users, roles, tokens and quotas: who may do what, and how much they may use."""
