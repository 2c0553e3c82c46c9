"""Integrations of jetgym's scorers into other tools. `jetgym.integrations.lm_eval`: an lm-evaluation-harness
model backed by the `jet` scorer (needs the `lm-eval` extra). Importing this package imports nothing heavy."""
