"""Device-side workloads and their NumPy (CPU) references; never imports pacer."""
