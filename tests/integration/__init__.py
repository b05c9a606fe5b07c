"""Tests against real server processes, clusters and browsers."""
