"""The HTTP API server: FastAPI app, auth, object routes, logs, metrics. Never talks to backends."""
