"""What a conversion is asked for, made once: ConvertOptions (convert.py), their checks against a
model (checks.py), node-name patterns (patterns.py) and --low-io (low_io.py).
"""
