"""Sizes and bytes: shapes resolved from the input dims (rules, layers, symbolic dims, default
dims) and the memory-traffic estimate the placement and the report use.
"""
