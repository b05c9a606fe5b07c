"""Unit tests of devices and their allocation (aipaas.devices)."""
