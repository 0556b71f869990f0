"""What the precision steps hand each other and the algorithms they share: the plan's types, the
exact minimum cut, control-flow boundaries and scoped names.
"""
