"""Benchmarks that print tsched's performance figures (DESIGN.md section 11).

Run each one from the repository root, e.g. `python -m bench.lifecycle`; see bench/README.md.
"""
