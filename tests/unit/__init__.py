"""Tests in one process: no server process, cluster or browser."""
