"""The HTML pages, rendered from validation and --auto results (so above both): the renderer,
--auto's page and validate --html's trace of intermediate values.
"""
