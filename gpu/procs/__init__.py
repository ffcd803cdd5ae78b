"""Synthesis in worker processes: the executor, its fill table, mappings, preload, lifeline."""
