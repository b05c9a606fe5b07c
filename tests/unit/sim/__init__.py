"""Unit tests of the simulator and its scenarios (aipaas.sim)."""
