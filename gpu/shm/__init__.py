"""Shared blocks, kept pools' records, their handover; no NumPy (`pacer settle` reads them)."""
