"""Thin Hydra entry points; each calls a plain function."""
