"""Unit tests of the CLI (aipaas.cli) against an in-process server."""
