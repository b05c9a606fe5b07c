"""Builders, servers and fixtures that more than one test directory uses."""
