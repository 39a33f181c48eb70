"""What every part of the controller shares: its configuration (``config``), which resources count
as GPUs (``gpu_resources``), the Event reasons it writes (``events``), its Prometheus metrics
(``metrics``), its one retry policy (``backoff``), the one reader of the JSON and YAML files a
user names (``documents``) and the one line for an API server it cannot reach
(``api_connection``).

May import: ``policies``, ``cli`` (the command lines' wording of file errors) and libraries.
Nothing else in ``controller`` (the lowest layer).
"""
