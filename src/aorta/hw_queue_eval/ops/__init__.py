"""Op records and the figures computed from them (folding, histograms, switch and gap metrics).

Below backends and run: backends build OpRecords and fold them here, the harness and result
readers compute metrics from them (docs/architecture.md, "Folder order").
"""
