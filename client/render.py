"""Plain-text tables and key/value blocks for tsctl's default (non-JSON) output."""
from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

CELL_CHARS_MAX = 60   # long payloads and errors are cut in tables; --json shows everything

TASK_COLUMNS = [("task_id", "TASK_ID"), ("task_type", "TYPE"), ("tenant", "TENANT"),
                ("status", "STATE"), ("priority", "PRI"), ("attempt", "ATTEMPT"),
                ("run_at", "RUN_AT")]
ATTEMPT_COLUMNS = [("attempt", "ATTEMPT"), ("worker_id", "WORKER"), ("fencing_token", "TOKEN"),
                   ("started_at", "STARTED"), ("ended_at", "ENDED"), ("outcome", "OUTCOME"),
                   ("error", "ERROR")]
SCHEDULE_COLUMNS = [("schedule_id", "SCHEDULE_ID"), ("tenant", "TENANT"), ("cron", "CRON"),
                    ("timezone", "TZ"), ("task_type", "TYPE"), ("paused", "PAUSED"),
                    ("next_fire_at", "NEXT_FIRE")]
FIRE_COLUMNS = [("fire_at", "FIRE_AT"), ("outcome", "OUTCOME"), ("task_id", "TASK_ID")]
TENANT_COLUMNS = [("tenant", "TENANT"), ("max_running", "MAX_RUNNING"), ("weight", "WEIGHT"),
                  ("running", "RUNNING"), ("pending", "PENDING")]
NODE_COLUMNS = [("id", "ID"), ("role", "ROLE"), ("http", "HTTP"), ("raft", "RAFT"),
                ("commit_index", "RAFT_COMMIT"), ("applied_seq", "APPLIED_SEQ"), ("lag", "LAG"),
                ("digest", "DIGEST"), ("reachable", "REACHABLE")]
DIGEST_CHARS = 12   # of a replica's state digest in tables: enough to tell two apart
HIDDEN_KEYS = frozenset({"attempts", "fires", "applied_seq"})
TRACEBACK_INDENT = "    "


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    text = text.replace("\n", " ")
    return text if len(text) <= CELL_CHARS_MAX else text[:CELL_CHARS_MAX - 3] + "..."


def table(rows: Iterable[dict], columns: Sequence[tuple[str, str]]) -> str:
    grid = [[title for _, title in columns]]
    grid += [[cell(_pick(row, key)) for key, _ in columns] for row in rows]
    widths = [max(len(r[i]) for r in grid) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in grid)


def _pick(row: dict, key: str) -> Any:
    if key in row:
        return row[key]
    template = row.get("task")   # schedules may nest the task fields
    return template.get(key) if isinstance(template, dict) else None


def fields(obj: dict) -> str:
    """One `key: value` line per scalar field (nested lists shown as tables elsewhere)."""
    keys = [k for k in obj if k not in HIDDEN_KEYS]
    width = max((len(k) for k in keys), default=0)
    return "\n".join(f"{k.ljust(width)}  {cell(obj[k])}" for k in keys)


LIMIT_COLUMNS = [("name", "LIMIT"), ("rate", "RATE"), ("per_s", "PER_S"),
                 ("concurrency", "CONCURRENCY"), ("partition_by", "PARTITION_BY"),
                 ("in_use", "IN_USE"), ("in_window", "IN_WINDOW"), ("held", "HELD")]
PARTITION_COLUMNS = [("partition", "PARTITION"), ("running", "RUNNING"),
                     ("in_window", "IN_WINDOW"), ("held", "HELD")]


def limited_by(why: dict) -> str:
    """A held task's wait: `partner-api (partition acme) until <time>`."""
    part = f" (partition {why['partition']})" if why.get("partition") else ""
    until = f"until {why['until']}" if why.get("until") else "until a running task of it ends"
    return f"{why.get('limit')}{part} {until}"


def limit_detail(limit: dict) -> str:
    out = fields({k: v for k, v in limit.items() if k != "partitions"})
    if limit.get("partitions"):
        out += "\n\nbusiest partitions:\n" + table(limit["partitions"], PARTITION_COLUMNS)
    return out


PAUSE_COLUMNS = [("task_type", "TYPE"), ("tenant", "TENANT"), ("paused_at", "PAUSED_AT"),
                 ("actor", "BY"), ("reason", "REASON")]


def paused(pause: dict) -> str:
    """A paused task's wait: `task_type=charge, tenant=* since <time> by admin: <reason>`."""
    sel = f"task_type={pause.get('task_type') or '*'}, tenant={pause.get('tenant') or '*'}"
    reason = f": {pause['reason']}" if pause.get("reason") else ""
    return f"{sel} since {pause.get('paused_at')} by {pause.get('actor') or '-'}{reason}"


def pauses_table(pauses: list[dict]) -> str:
    rows = [{**p, "task_type": p.get("task_type") or "*", "tenant": p.get("tenant") or "*"}
            for p in pauses]
    return table(rows, PAUSE_COLUMNS) if rows else "no queue is paused"


PROGRESS_BAR_CHARS = 20


def progress(p: dict) -> str:
    """A running task's progress: `[##########          ]  50%  half (at <time>)`."""
    value = p.get("fraction")
    fraction = float(value) if isinstance(value, (int, float)) else 0.0
    filled = round(fraction * PROGRESS_BAR_CHARS)
    bar = "#" * filled + " " * (PROGRESS_BAR_CHARS - filled)
    message = f"  {p['message']}" if p.get("message") else ""
    at = f" (at {p['at']})" if p.get("at") else ""
    return f"[{bar}] {fraction * 100:3.0f}%{message}{at}"


def task_detail(task: dict) -> str:
    if isinstance(task.get("limited_by"), dict):
        task = {**task, "limited_by": limited_by(task["limited_by"])}
    if isinstance(task.get("progress"), dict):
        task = {**task, "progress": progress(task["progress"])}
    hint, pause = task.get("unclaimed_type"), task.get("paused")
    task = {k: v for k, v in task.items() if k not in ("unclaimed_type", "paused")}
    out = fields(task)
    if isinstance(pause, dict):   # the pause that holds it, in full (its reason is long)
        out += f"\npaused: {paused(pause)}"
    if isinstance(hint, dict):   # the leader's hint, in full on a line of its own
        out += f"\nhint: {hint.get('message')}"
    if task.get("attempts"):
        out += "\n\nattempts:\n" + table(task["attempts"], ATTEMPT_COLUMNS)
        out += "".join(_traceback(a) for a in task["attempts"])
    return out


def _traceback(attempt: dict) -> str:
    """A failed attempt's traceback in full (the table cuts its error to one cell)."""
    detail = attempt.get("error_detail")
    if not isinstance(detail, dict) or not detail.get("traceback"):
        return ""
    body = "\n".join(TRACEBACK_INDENT + line for line in detail["traceback"].splitlines())
    return (f"\n\nattempt {attempt.get('attempt')} {detail.get('type')}: "
            f"{detail.get('message')}\n{body}")


def schedule_detail(schedule: dict) -> str:
    out = fields(schedule)
    if schedule.get("fires"):
        out += "\n\nrecent fires:\n" + table(schedule["fires"], FIRE_COLUMNS)
    return out


SHARD_COLUMNS = [("shard", "SHARD"), ("id", "NODE"), ("role", "ROLE"), ("term", "TERM"),
                 ("commit_index", "RAFT_COMMIT"), ("applied_seq", "APPLIED_SEQ"),
                 ("lag", "LAG"), ("digest", "DIGEST"), ("reachable", "REACHABLE")]


SPREAD_COLUMNS = [("shard", "SHARD"), ("leader", "LEADER"), ("term", "TERM"),
                  ("pending", "PENDING"), ("running", "RUNNING"), ("completed", "COMPLETED"),
                  ("dead_letter", "DEAD_LETTER")]


def tenant_view(tenant: dict) -> dict:
    """A tenant as tables show it: a running cap of 0 is no cap (`none`, as the dashboard
    says); --json keeps the API's 0."""
    return {**tenant, "max_running": tenant.get("max_running") or "none"} \
        if "max_running" in tenant else tenant


def _replica_rows(nodes: list[dict]) -> list[dict]:
    """Replicas of one group as tables show them: the digest cut short, and LAG, how many
    batches a replica has applied fewer than the group's furthest one (as the dashboard
    counts). RAFT_COMMIT is the Raft log's index, which also counts Raft's own entries, so
    it is not comparable with APPLIED_SEQ (the state machine's batches)."""
    seqs = [n["applied_seq"] for n in nodes if isinstance(n.get("applied_seq"), int)]
    top = max(seqs, default=None)
    out = []
    for node in nodes:
        row = dict(node)
        if isinstance(row.get("digest"), str):
            row["digest"] = row["digest"][:DIGEST_CHARS]
        seq = row.get("applied_seq")
        row["lag"] = top - seq if top is not None and isinstance(seq, int) else None
        out.append(row)
    return out


def cluster_detail(status: dict, by_shard: dict | None = None) -> str:
    """Nodes (with each replica's digest: replicas at the same APPLIED show the same one)
    and, with shards, each shard's replicas and tasks."""
    head = f"leader: {cell(status.get('leader'))}   term: {cell(status.get('term'))}"
    shards = status.get("shards")
    if not shards:
        return head + "\n" + table(_replica_rows(status.get("nodes") or []), NODE_COLUMNS)
    leads: dict[str, int] = {}
    for s in shards:
        if s.get("leader"):
            leads[s["leader"]] = leads.get(s["leader"], 0) + 1
    out = [f"shards: {len(shards)}   leaders: " + (", ".join(
        f"{n} leads {k}" for n, k in sorted(leads.items())) or "-")]
    out.append(table(status.get("nodes") or [], NODE_COLUMNS[:4]))
    spread = [{"shard": s["shard"], "leader": s.get("leader"), "term": s.get("term"),
               **((by_shard or {}).get(str(s["shard"])) or {})} for s in shards]
    out.append(table(spread, SPREAD_COLUMNS))
    rows = [dict(node, shard=s["shard"]) for s in shards
            for node in _replica_rows(list(s.get("nodes") or ()))]
    out.append(table(rows, SHARD_COLUMNS))
    return "\n\n".join(out)
