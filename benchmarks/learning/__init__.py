"""Benchmarks: learning."""
