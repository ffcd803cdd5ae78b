"""The ntt workload: its device code and NumPy (CPU) references.

Only `gpu.workload`, the adapter to pacer's Workload contract, imports pacer.
"""
