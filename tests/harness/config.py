"""cluster.toml of a local cluster: the one writer of the tests' and benchmarks' configs."""
from __future__ import annotations


def cluster_toml(name: str, raft: dict[str, str], http: dict[str, str],
                 data_dirs: dict[str, str], *, shards: int = 1, secret: str | None = None,
                 extra_toml: str = "") -> str:
    """The file's text: [cluster] (`shards` only when not 1, `secret` when given), one
    [[node]] per id of `raft` in its order, then `extra_toml` as it is."""
    lines = ["[cluster]", f'name = "{name}"']
    if shards != 1:
        lines.append(f"shards = {shards}")
    if secret:
        lines.append(f'secret = "{secret}"')
    for i in raft:
        lines += ["", "[[node]]", f'id = "{i}"', f'raft = "{raft[i]}"',
                  f'http = "{http[i]}"', f'data_dir = "{data_dirs[i]}"']
    return "\n".join(lines) + "\n" + extra_toml
