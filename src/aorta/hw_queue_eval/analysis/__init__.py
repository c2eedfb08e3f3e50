"""Pure analysis of results: statistics, scaling verdicts, run-to-run comparison."""
