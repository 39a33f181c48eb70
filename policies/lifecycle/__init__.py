"""A stored plan and its state machine: ``plan_record`` (the stored form and its versions) and
``lifecycle.next_step`` (what the controller does next for a plan, given what it observes).

May import: nothing else in ``policies``.
"""
