"""Finding passages: hybrid search, reranking, whole sections, and how confident the
retrieval is.
"""
