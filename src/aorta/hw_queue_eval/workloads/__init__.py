"""Workloads: one module each; the registry lists them."""
