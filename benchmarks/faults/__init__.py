"""Benchmarks: faults."""
