"""Process helpers: supervised tasks, daemon threads, signals, logs, the early start."""
