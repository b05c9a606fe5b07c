"""The test suite: unit, integration and kube tests, and the helpers they share (tests/support)."""
