"""aipaas: a multi-tenant platform for GPU work."""

__version__ = "0.1.0"
