"""Unit tests of the controller (aipaas.controller) over a store and the simulator."""
