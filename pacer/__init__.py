"""pacer: paces partition dispatch between CPU synthesis and GPU workers."""

__version__ = "0.1.0"

__all__ = ["__version__"]
