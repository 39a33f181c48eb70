"""The processes: ``cli`` (``ckpt-preempt``) dispatches to one ``cmd_*`` module per subcommand;
``runner`` wires the watch, the reconcile loop, health and leader election into ``run``;
``server`` serves /metrics and the probes; ``logs`` sets up logging; ``trace_files`` reads the
traces ``simulate`` replays. ``cmd_common`` holds what several commands parse alike.

May import: every other package of ``controller``; nothing imports it.
"""
