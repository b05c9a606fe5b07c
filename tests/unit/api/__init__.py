"""Unit tests of aipaas.api: the manifests, their validation and wire forms."""
