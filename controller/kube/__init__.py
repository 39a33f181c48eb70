"""The cluster as the controller reads it: one ``informer.Informer`` per kind, the ``watch``
cache built from them (with native, Volcano and coscheduling PodGroups and DRA claims), the
compact ``records`` each object is trimmed to, ``convert`` from records to
``policies.model.snapshot.Snapshot``, and the incremental ``cluster_model`` a pass reads.

May import: ``core`` and ``policies``. Reads only: nothing here writes to the API.
"""
