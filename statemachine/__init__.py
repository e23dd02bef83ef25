"""tsched deterministic task state machine (pure: no I/O, clocks or randomness)."""
