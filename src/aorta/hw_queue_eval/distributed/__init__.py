"""Runs under torchrun: rank environment, gather, one tracer per node."""
