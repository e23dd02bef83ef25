"""How many examples a property test asks Hypothesis for.

The optional compiled build runs these tests a second time, on its own modules
(tests/integration/test_compiled_build.py), after the Python build has run them in full in
the same suite. There the models meet the compiled code at a quarter of the examples: that run
looks for a difference between the builds (a type the compiled code checks, an int it
keeps unboxed), and the two builds' equality has its own seeded workload of thousands of
steps besides (tests/integration/sm_workload.py). The compiled code at the suite's -O0 is
no faster than the interpreter: with the full count that run took 41 CPU-seconds, with
half 21 (and the property tests were half of that)."""
from __future__ import annotations

from tsched.statemachine import StateMachine

COMPILED = hasattr(StateMachine, "__mypyc_attrs__")
COMPILED_SHARE = 4      # the compiled build's run asks for a quarter of the examples
COMPILED_MIN = 20       # and never fewer than this


def examples(n: int) -> int:
    """`n` on the Python build; a quarter of it (at least COMPILED_MIN) on the compiled one."""
    return max(n // COMPILED_SHARE, min(n, COMPILED_MIN)) if COMPILED else n
