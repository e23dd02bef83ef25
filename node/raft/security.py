"""The Raft port's one rule of exposure: no non-loopback address without a secret."""
from __future__ import annotations

import ipaddress


class RaftSecurityError(ValueError):
    """The Raft configuration would expose an unauthenticated pickle port."""



def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_raft_security(addresses: list[str], secret: str | None) -> None:
    if secret:
        return
    exposed = [a for a in addresses if not is_loopback_host(a.rsplit(":", 1)[0])]
    if exposed:
        raise RaftSecurityError(
            f"Raft addresses {', '.join(exposed)} are not loopback: set cluster.secret "
            "(Raft messages are pickles; anyone who can connect could run code)")

