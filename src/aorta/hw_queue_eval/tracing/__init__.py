"""The harness side of eBPF: the window tracer and its comparison with harness figures."""
