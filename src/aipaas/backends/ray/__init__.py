"""Tasks run in a Ray cluster (``--backend ray --ray-address ADDR``).

backend.py: what the controller holds, a proxy to driver.py, the Ray driver, which runs in a
process of its own (driver_process.py); supervisor.py: the detached actor that submits
the tasks and answers for them; runner.py: the Ray task that runs a task's command;
inventory.py: Ray's nodes as aipaas's; records.py: the driver's records of its tasks.
"""
