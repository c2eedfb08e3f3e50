"""What a user reads: console blocks, tables, plots, the HTML page, the trace export."""
