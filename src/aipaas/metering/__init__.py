"""Usage: GPU-hours and CPU-hours by tenant, queue, user and GPU model, from task records."""
