"""What the precision steps hand each other and the algorithms they share: the plan's types, the
placement cut (cut.py: the draft plan as a flow network) and its exact minimum-cut solver,
control-flow boundaries and scoped names.
"""
