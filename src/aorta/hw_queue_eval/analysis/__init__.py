"""Pure analysis of results: per-run summaries, statistics, scaling verdicts, diagnosis, comparison."""
