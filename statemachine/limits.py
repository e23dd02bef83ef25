"""Limits: every bound of tsched, in one place, units last in every name.

Two frozen dataclasses:

- `Limits`: the bounds of the replicated state. Every collection and every size in the
  state machine is bounded, so that a misbehaving or malicious client can only ever get a
  rejection code, never unbounded memory. The values are part of the replicas'
  configuration (`[limits]` in cluster.toml): all replicas of one cluster must use equal
  Limits, because a limit decides results (a 429 on one replica and a 201 on another would
  diverge).
- `ApiLimits`: bounds that only the HTTP layer has (request sizes, waits, pages). They do
  not decide replicated results, so they are not replica configuration.

The HTTP layer (`node/api/validate.py`), its OpenAPI document (`node/api/openapi/`) and `tsctl`
(`client/cli*.py`) take their numbers from `LIMITS` and `API_LIMITS` below, so a request the
state machine would refuse is refused before anything is proposed: nothing over a limit is
written to the Raft log. This module imports nothing, so that the client can use it.
"""
from __future__ import annotations

from dataclasses import dataclass

SECOND_MS = 1_000
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
    # The request table (DESIGN 6): every request id is kept at least `request_window_ms`
    # after it was recorded, and `request_ahead_ms_max` longer (an id whose client time is
    # that far ahead of the state clock expires that much later). A timed id older than the
    # window is refused `request_expired`, one further ahead than `request_ahead_ms_max` is
    # refused `invalid_argument`. The count bound holds the design's peak, 10,000 recorded
    # writes/s, for window + ahead (150 s): about 560 MiB at ~390 B an entry (a submit's
    # answer, bench/request_table_bytes.py). Full with its oldest entry still kept: a new
    # write is refused `tenant_limit` (nothing is forgotten early).
    requests_max: int = 1_500_000
    request_window_ms: int = 120_000         # 4 x the client's 30 s retry horizon
    request_ahead_ms_max: int = 30_000       # client clocks within 30 s of the cluster's
    attempts_kept_max: int = 50              # per task; older attempts are dropped
    fires_kept: int = 20                     # FireRecords per schedule
    claim_tasks_max: int = 100               # max_tasks of one Claim
    claim_task_types_max: int = 50
    tier_weight_max: int = 1_000             # a claim's weight of one tier (DESIGN 5.1)
    batch_commands_max: int = 10_000         # commands in one Raft entry (codec)
    evictions_per_tick_max: int = 10_000     # bounded work per Tick

    # --- load shedding (DESIGN 14.2): past this share of live_tasks_max, submits of a
    # priority numerically greater than shed_priority_above are refused (`overloaded`).
    # Permille, not a float: replicas must decide alike to the bit. ([limits] shed_above
    # in cluster.toml is the fraction; the node converts it.)
    shed_above_permille: int = 800
    shed_priority_above: int = 5

    # --- the audit trail (DESIGN 14.6): entries kept per shard (oldest evicted, archived
    # with [archive]), the bound of one entry's change (compact JSON), an actor's name.
    audit_entries_max: int = 100_000
    audit_change_bytes_max: int = 4_096
    audit_actor_chars_max: int = 128

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
    fencing_token_max: int = 2 ** 63 - 1     # a signed 64-bit integer in every client

    # --- tenants --------------------------------------------------------------------------
    tenant_running_max: int = 1_000_000      # a tenant's max_running setting (0: no cap)
    tenant_weight_max: int = 1_000           # a tenant's fair-share weight (at least 1)

    # --- leases ---------------------------------------------------------------------------
    lease_ms_min: int = 1_000                # shorter leases expire under normal GC pauses
    lease_ms_max: int = 3_600_000
    prefetch_ms_max: int = 1_000             # early dispatch horizon (DESIGN section 4)
    # Worker sessions (sessions.py): a silent worker's tasks go back after its timeout.
    # Under a second, a GC pause or a busy loop would cut a live worker off; past a minute
    # a lease does as well.
    session_timeout_ms_min: int = 1_000
    session_timeout_ms_max: int = 60_000
    sessions_max: int = 100_000              # open sessions (one per worker lane)
    # A running task's progress (a heartbeat's, DESIGN 9): the fraction is kept in
    # thousandths (no floats in the state), the message is a short line for a person.
    progress_permille_max: int = 1_000
    progress_message_chars_max: int = 200

    # --- keyed limits (ratelimits.py, issue 46) ------------------------------------------
    limits_max: int = 64                     # declared limits
    limit_name_chars_max: int = 64
    limit_field_chars_max: int = 64          # a partition_by payload field's name
    limits_per_task_max: int = 4
    limit_partitions_max: int = 10_000       # busy partitions per limit (idle: forgotten)
    limit_rate_max: int = 10_000             # a window's claims (each one is kept: memory)
    limit_per_ms_max: int = 3_600_000
    limit_concurrency_max: int = 100_000
    limit_pause_ms_max: int = 3_600_000      # a RateLimited report's after_s

    # --- paused queues (pauses.py, issue 48): every shard holds every pause, and a claim
    # looks each of its buckets up among them, so they are few.
    queue_pauses_max: int = 256
    pause_reason_chars_max: int = 256

    # --- ordering and retention -----------------------------------------------------------
    aging_interval_ms: int = 600_000         # one priority level gained per interval waited
    retention_ms: int = 7 * DAY_MS           # terminal tasks kept this long
    now_ms_max: int = 2 ** 53                # epoch ms fit a double, so JSON clients agree

    # --- schedules ------------------------------------------------------------------------
    catchup_window_ms_max: int = 7 * DAY_MS
    jitter_ms_max: int = 3_600_000
    misfire_skip_grace_ms: int = 1_000       # misfire "skip": a fire later than this is skipped

    # --- workflows (DESIGN 5.2): a graph is one log entry, so its size is bounded; a
    # fan-in callback may wait on every other step, so deps per step reach steps per
    # workflow, and the edges in all are bounded apart. Finished workflows are kept until
    # the steps kept reach their bound (then the oldest finished go first). A step's result
    # is bounded tighter than a task's: a child loads every parent's result.
    workflow_steps_max: int = 20_000         # a 10,000-step fan-out and its callbacks fit
    workflow_deps_max: int = 20_000          # deps of one step
    workflow_edges_max: int = 100_000        # deps of all steps of one workflow
    workflows_open_per_tenant_max: int = 1_000
    workflow_steps_kept_max: int = 2_000_000  # steps of every kept workflow (memory)
    step_name_chars_max: int = 128
    step_result_bytes_max: int = 16_384


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiLimits:
    body_bytes_max: int = 1_048_576          # a request's whole body (its task payloads are
                                             # each bounded by Limits.payload_bytes_max too)
    request_items_max: int = 1_000           # tasks of a batch submit, items of a batch call
    claim_wait_ms_max: int = 60_000          # how long a claim may long-poll
    worker_slots_max: int = 10_000           # a worker's reported slots (claims, heartbeats)
    list_page_items_max: int = 1_000         # `limit` of a listing
    json_depth_max: int = 64                 # nesting of a body (Python's json fails ~1000)
    epoch_ms_max: int = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, any instant given
    cron_preview_fires_max: int = 100        # `count` of GET /v1/cron/preview
    cursor_chars_max: int = 512              # an opaque listing cursor
    audit_scan_max: int = 10_000             # entries one GET /v1/audit page examines
    # Tasks one GET /v1/tasks page examines under the replica lock (DESIGN 7: what it holds
    # the apply for); a page that stops there carries a next_cursor to go on from.
    task_scan_max: int = 2_000
    audit_target_chars_max: int = 256        # `target` of GET /v1/audit
    audit_action_chars_max: int = 64         # `action` of GET /v1/audit
    # A failure's detail (DESIGN 14.1): stored as JSON text inside `error_bytes_max`, so the
    # three together, escaped, stay under it.
    error_type_chars_max: int = 256          # the exception's class name
    error_message_chars_max: int = 2_048
    traceback_chars_max: int = 4_096         # the Worker keeps the last ones (the raise)
    # Overload (DESIGN 14.2): the Retry-After of a 429 `overloaded`, how many writes a node
    # keeps waiting for commit, and how many submit requests it serves at once, before it
    # answers new submits with it.
    shed_retry_after_s: int = 5              # the state machine shed a low priority
    queue_full_retry_after_s: int = 1        # this node's proposal queue was full
    # ~ a node's commit rate (~5,000 submits/s on 2 cores) x the ~2 s a submit may wait;
    # many full batches (`request_items_max`) fit, so a healthy cluster never sheds.
    proposals_waiting_max: int = 10_000
    # Submit requests in progress at one node (node/api/admission.py): past either bound a new
    # submit is answered `busy` before its body is read. Requests, not tasks: a request's
    # HTTP cost is what starves a node's loop (tasks are bounded by the proposal queue).
    # The benches' heaviest healthy load keeps 4 batch requests in progress per node,
    # and a commit waits well under a second, so neither bound is reached there.
    submits_in_progress_max: int = 256
    submit_wait_ms_max: int = 5_000          # age of the oldest submit still in progress
    busy_retry_after_s: int = 1              # this node had too many submits in progress
    # Listing pages (GET /v1/tasks, /v1/workflows, /v1/audit) a node serves a second, a
    # token bucket (node/api/read_budget.py; `[limits] list_pages_per_s`, 0: no budget, and
    # `list_burst_pages`): a page past it waits for its token up to `list_wait_ms_max`,
    # then is answered 429 `overloaded` (reason `read_budget`). A page holds the node's
    # loop about 1-5 ms, so the default share is at most a quarter of a core; a client
    # reading back to back asked ~1,500 pages a second (bench/notes/2026-12-06-bounded-
    # listings.md). At least 1 a second: a client reading one page after another is
    # then paced by the wait, never refused.
    list_pages_per_s: int = 50
    list_burst_pages: int = 10
    list_wait_ms_max: int = 1_000
    # Overload keeps the urgent (DESIGN 5.1, 14.2): past either bound above, a submit whose
    # every task has a priority up to `urgent_priority_max` (the default tiers critical and
    # high) is still admitted, up to `urgent_bound_factor` times the bound.
    urgent_priority_max: int = 3
    urgent_bound_factor: int = 2
    # Connections the kernel queues for a node's HTTP listener before it accepts them
    # (aiohttp's default is 128; the kernel caps it at net.core.somaxconn). A burst of
    # clients past it has its connects dropped and retried by TCP after 1, 3, 7 s: time
    # no admission check sees, spent before a busy node could answer at once.
    accept_queue_connections_max: int = 1_024


LIMITS = Limits()          # the defaults: what a cluster without `[limits]` uses
API_LIMITS = ApiLimits()
