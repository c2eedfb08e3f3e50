"""Vendor-neutral kernel tracing engine (bpftrace), usable without the benchmark."""
