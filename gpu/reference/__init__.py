"""The NumPy reference: transforms, synthesis, verification, digests, CPU backends."""
