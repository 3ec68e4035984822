"""Benchmarks: measured runs against real broker processes (not tests)."""
