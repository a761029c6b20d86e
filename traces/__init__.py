"""Routing traces: schema v1, Parquet I/O, capture from live models, converters, synthetic traces."""
