"""JSON Schema files of the result formats (package data)."""
