"""Unit tests of datasets (aipaas.data)."""
