"""Prometheus metrics, on a registry the caller provides."""
