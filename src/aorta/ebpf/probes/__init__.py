"""Probe families: each declares its tracepoints, renders bpftrace code, and reads its maps."""
