"""The CUDA side: kernels, transforms on CuPy, tables, provers, the driver's devices."""
