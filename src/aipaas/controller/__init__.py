"""The controller: the one writer of status. Reads the store, asks backends what is true, runs a
scheduling cycle, carries decisions out through a backend, writes status and events back."""
