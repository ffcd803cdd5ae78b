"""The controller and what it reads: pure code on an injected clock."""
