"""A Jepsen-style fault harness for tsched: real nodes, proxied links, a recorded history
and a checker (DESIGN.md section 10). Run with `python -m tests.jepsen_like --help`."""
