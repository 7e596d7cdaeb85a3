"""Text utilities with no database: token counting, chunking, sentences and stemming."""
