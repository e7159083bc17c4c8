"""Benchmarks (stub in the channel branch: the bench dispatcher replaces it)."""
