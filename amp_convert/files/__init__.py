"""Files in and out: loading and the checks of the input proto, load repairs, the output registry,
atomic writes (safe_write, pair_write) and memory budgets.
"""
