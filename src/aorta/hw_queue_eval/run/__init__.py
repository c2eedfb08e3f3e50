"""One measured run: its configuration, the harness around the window, and its metrics."""
