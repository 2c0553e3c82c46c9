"""The lab: benchmarks that measure jetgym and write docs/benchmarks.md. Run from a checkout as
`python -m benchmarks.<name>`; not part of the installed package (benchmarks/README.md lists them)."""
