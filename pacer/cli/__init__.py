"""The command line: `pacer run`, `submit`, `status`, and what they share."""
