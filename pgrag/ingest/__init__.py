"""Getting documents in: reading files (a module per format), chunking, planning what changed,
writing it whole, and removing what is gone.
"""
