"""tsched deterministic task state machine (pure: no I/O, clocks or randomness)."""
from . import codec, commands, errors
from .limits import Limits
from .machine import StateMachine
from .model import (STATES, TERMINAL, TRANSITIONS, Attempt, FireRecord, Schedule, Task,
                    TenantView, transition)

__all__ = ["StateMachine", "Limits", "codec", "commands", "errors", "Task", "Attempt",
           "Schedule", "FireRecord", "TenantView", "TRANSITIONS", "STATES", "TERMINAL",
           "transition"]
