"""Turning text into vectors: the local and remote embedders, models as data, re-embedding, the
worker and the query cache.
"""
