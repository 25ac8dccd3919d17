"""Replayed Intel Berkeley Research Lab temperatures as a 50-arm plant (data in `data/`)."""
