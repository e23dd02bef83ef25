"""systemd's readiness protocol (sd_notify), for `Type=notify` units
(deploy/systemd/tsnode@.service): a datagram to the socket systemd names in `NOTIFY_SOCKET`.

`READY=1` once the node's HTTP API listens and its replica runs (so `systemctl start`
returns when the node serves), `STOPPING=1` when a stop begins. Without `NOTIFY_SOCKET`
(not started by systemd) nothing is sent. The variable is taken out of the environment
once read, so that a process the node starts (a shard process) never speaks for it.
"""
from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("tsched.node")
ENV = "NOTIFY_SOCKET"


class Notifier:
    """Sends states to systemd's notify socket, when there is one."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.address = env.pop(ENV, None) or None

    def send(self, state: str) -> bool:
        """True when the state was handed to systemd; a failure is logged, never raised
        (systemd then reports the unit as not ready, which says enough)."""
        if self.address is None:
            return False
        # An address starting with "@" is in Linux's abstract namespace.
        address = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto(state.encode(), address)
            return True
        except OSError as exc:
            log.warning("event=sd_notify_failed state=%s address=%s error=%s",
                        state, self.address, exc)
            return False
