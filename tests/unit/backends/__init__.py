"""Unit tests of the backends (aipaas.backends) without their real clusters."""
