"""Reports: the shared base (versioned JSON), the ConversionReport and the value map that says
where every original value went.
"""
