"""The database: finding and connecting to it, who the session reads as, named queries, the schema
and its migrations, and the embedded server.
"""
