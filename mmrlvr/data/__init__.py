"""Data: media decoding, JSONL/Parquet loading, and batching through the processor."""
