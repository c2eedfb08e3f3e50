"""CLI commands, one module per command family; each exposes register(group)."""
