"""The checkpoint agent that runs beside a training job: it watches its pod's drain annotation,
tells the job over a local socket (the SDK's protocol, ``agent``) and writes the ack; its
process wrapper (``agent_process``).

May import: ``core`` and libraries. Nothing else in ``controller``: it runs in the tenant's pod.
"""
