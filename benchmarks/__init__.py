"""Benchmark scripts by purpose; `common` is their one shared helper module."""
