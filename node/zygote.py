"""`python -m tsched.node.zygote FD [LABEL...]`: a process that has imported the node once and
forks a `tsnode` per request on the Unix socket FD (node/forkserver.py: the protocol and
the theory of operation), for a machine that starts hundreds of nodes (a test suite,
client/forked.py). LABEL: words `ps` shows after the command, nothing else reads them.
"""
from __future__ import annotations

import socket
import sys

from tsched.node import forkserver
from tsched.node import main as node_main


def main() -> None:
    forkserver.serve(socket.socket(fileno=int(sys.argv[1])), node_main.tsnode)


if __name__ == "__main__":
    main()
