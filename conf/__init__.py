"""Hydra configs of the jobs (package data, found through importlib.resources)."""
