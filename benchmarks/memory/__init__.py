"""Benchmarks: memory."""
