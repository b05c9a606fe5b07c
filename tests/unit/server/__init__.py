"""Unit tests of the API server (aipaas.server) through an in-process client."""
