"""Small helpers shared by every aorta package: errors, safe file output."""
