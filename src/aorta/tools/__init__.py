"""Stand-alone helpers run beside a benchmark (e.g. the memory-pressure load generator)."""
