"""Benchmark scripts that print figures (not timed tests). See bench/convert_bench.py."""
