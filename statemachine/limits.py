"""Limits: every bound of the replicated state, in one frozen dataclass.

Every collection and every size in the state machine is bounded, so that a misbehaving or
malicious client can only ever get a rejection code, never unbounded memory. The values are
part of the replicas' configuration: all replicas of one cluster must use equal Limits,
because a limit decides results (a 429 on one replica and a 201 on another would diverge).
"""
from __future__ import annotations

from dataclasses import dataclass

DAY_MS = 86_400_000


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    # --- identifiers: bounded so that indexes and snapshots stay small ---------------------
    id_chars_max: int = 128                  # task_id, request_id, worker_id, schedule_id
    tenant_chars_max: int = 64
    task_type_chars_max: int = 128
    idempotency_key_chars_max: int = 256
    cron_chars_max: int = 256
    timezone_chars_max: int = 64

    # --- sizes: payloads are replicated to every node and kept in memory -------------------
    payload_bytes_max: int = 65_536
    result_bytes_max: int = 65_536
    error_bytes_max: int = 8_192

    # --- counts ---------------------------------------------------------------------------
    live_tasks_max: int = 2_000_000          # pending + running, all tenants (memory)
    live_tasks_per_tenant_max: int = 1_000_000   # one tenant cannot fill the cluster
    terminal_tasks_max: int = 1_000_000      # retained finished tasks (oldest evicted)
    tenants_max: int = 10_000
    schedules_max: int = 100_000
    schedules_per_tenant_max: int = 1_000
    requests_max: int = 100_000              # request_id table (FIFO eviction)
    attempts_kept_max: int = 50              # per task; older attempts are dropped
    fires_kept: int = 20                     # FireRecords per schedule
    claim_tasks_max: int = 100               # max_tasks of one Claim
    claim_task_types_max: int = 50
    batch_commands_max: int = 10_000         # commands in one Raft entry (codec)
    evictions_per_tick_max: int = 10_000     # bounded work per Tick

    # --- task fields ----------------------------------------------------------------------
    priority_max: int = 10                   # 0 highest .. 10 lowest
    max_retries_max: int = 100
    timeout_ms_min: int = 1_000
    timeout_ms_max: int = 7 * DAY_MS
    run_at_ahead_ms_max: int = 366 * DAY_MS  # how far in the future a task may be scheduled
    backoff_ms_max: int = DAY_MS             # base_ms and max_ms of a retry policy
    multiplier_milli_min: int = 1_000        # backoff never shrinks
    multiplier_milli_max: int = 100_000
    jitter_permille_max: int = 1_000

    # --- leases ---------------------------------------------------------------------------
    lease_ms_min: int = 1_000                # shorter leases expire under normal GC pauses
    lease_ms_max: int = 3_600_000
    prefetch_ms_max: int = 1_000             # early dispatch horizon (DESIGN section 4)

    # --- ordering and retention -----------------------------------------------------------
    aging_interval_ms: int = 600_000         # one priority level gained per interval waited
    retention_ms: int = 7 * DAY_MS           # terminal tasks kept this long
    now_ms_max: int = 2 ** 53                # epoch ms fit a double, so JSON clients agree

    # --- schedules ------------------------------------------------------------------------
    catchup_window_ms_max: int = 7 * DAY_MS
    jitter_ms_max: int = 3_600_000
    misfire_skip_grace_ms: int = 1_000       # misfire "skip": a fire later than this is skipped
