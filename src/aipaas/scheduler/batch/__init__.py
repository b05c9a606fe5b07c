"""Batch scheduling over one snapshot: the queue tree, fair share and the actions of a cycle.

``model.py`` holds the snapshot and the decisions (pure data); ``cluster.py`` the placement
engine the actions use (``SnapshotCluster`` over the framework's ``Scheduler``);
``statement.py`` the transaction an action proposes changes in; ``session.py`` runs the actions
of a profile over one snapshot and returns ``Decisions``. The live controller
(controller/batch_cycle.py) and ``aipaas simulate cycle|run`` (sim/scenario*.py) both call
``run_session``: the same code decides in both.
"""
