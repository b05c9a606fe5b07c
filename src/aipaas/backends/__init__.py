"""Where tasks run: sim/ (virtual nodes), local/ (this machine), behind base.Backend."""
