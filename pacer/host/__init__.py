"""What the host offers: its memory and its cgroup's limit."""
