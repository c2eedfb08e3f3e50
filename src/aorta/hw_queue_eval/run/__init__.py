"""One measured run: the harness around the window, on-CPU time, the stream-order view, profiling."""
