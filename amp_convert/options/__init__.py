"""What a conversion is asked for, made once: ConvertOptions (convert.py), how every option is
declared (declare.py: the field metadata the CLI, the API and Olive read), their checks against a
model (checks.py), node-name patterns (patterns.py) and --low-io (low_io.py).
"""
