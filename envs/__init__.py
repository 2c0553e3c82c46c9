"""Environments and question sets that turn tasks into scorer questions (cheap to import)."""
