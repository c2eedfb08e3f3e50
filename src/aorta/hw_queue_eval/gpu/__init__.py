"""The GPU device side: clock/power control, its state file, policies, vendor drivers."""
