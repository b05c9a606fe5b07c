"""Tasks run in a Ray cluster (``--backend ray --ray-address ADDR``); see backend.py.

The package imports nothing of ``ray`` itself: registry.py imports backend.py (and ray) only
when the backend is asked for.
"""
