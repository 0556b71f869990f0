"""The command line: the click commands (convert, validate, --auto), their path options and
signal handling. Everything that parses argv lives here, above the libraries it drives.
"""
