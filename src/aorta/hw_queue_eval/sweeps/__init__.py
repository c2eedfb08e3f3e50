"""Runs in child processes: stream sweeps, policy sweeps, repeats, checkpoints."""
