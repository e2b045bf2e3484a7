"""Benchmarks: correctness."""
