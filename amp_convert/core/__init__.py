"""The vocabulary every layer shares: dtypes, domains, precision classes, reasons, proto walking,
tensors and the weight/scale rules, user text. It imports nothing above it but errors.
"""
