"""Answering from passages: ask, the prompt, citations, support, the offline reader, agentic search
and traces.
"""
