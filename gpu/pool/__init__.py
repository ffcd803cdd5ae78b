"""The pinned host-memory pool: slots, their memory, lending and keeping."""
