"""`tsnode --config cluster.toml --id n1`: one node of the cluster (DESIGN.md section 8).

The command line: its options are parsed here and handed to the composition root
(assembly.py), which starts Raft (the Replica), then the HTTP API on the node's address;
SIGTERM/SIGINT close the app, stop Raft and exit 0.
"""
from __future__ import annotations

import sys

import click

from tsched.node.assembly import run


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="cluster.toml")
@click.option("--id", "node_id", required=True, help="this node's id in the file")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text")
@click.option("--shard", type=int, default=None, hidden=True,
              help="run one shard replica (started by the node's supervisor)")
@click.option("--rejoin-empty", is_flag=True,
              help="discard this node's Raft log and snapshot (damaged data) and rejoin: it "
                   "votes in no election until caught up from the leader (with shards: every "
                   "local shard replica's)")
@click.option("--restore", "restore_from", type=click.Path(dir_okay=False), default=None,
              help="seed this node's empty data dir from a `tsctl backup` file, then start "
                   "(run it on every node of a fresh cluster)")
@click.option("--join", "join_url", default=None, metavar="URL",
              help="join the cluster of the member whose API is at URL (asks to be added when "
                   "not a member yet; admin token in $TSCHED_JOIN_TOKEN); the file needs only "
                   "this node's [[node]]")
def cli(config_path: str, node_id: str, log_format: str, shard: int | None,
        rejoin_empty: bool, restore_from: str | None, join_url: str | None) -> None:
    sys.exit(run(config_path, node_id, log_format, shard, rejoin_empty, restore_from, join_url,
                 tsnode))


def tsnode(args: list[str]) -> None:
    """This command line, given the arguments after the program's name: what a process
    forked from a fork server runs (node/forkserver.py)."""
    cli.main(args=args, prog_name="tsnode")


def main() -> int:
    cli()  # click exits
    return 0


if __name__ == "__main__":
    main()
