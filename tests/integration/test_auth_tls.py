"""HTTPS on a real 3-node cluster: nodes serve TLS with certificates made here (a test CA),
forward to each other over verified HTTPS, and the client and tsctl verify with a CA file."""
from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import ipaddress
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tsched.client import AsyncClient, Client, Unavailable
from tsched.client.cli import cli as tsctl

from tests.harness.cluster import TSNODE, Cluster
from tests.harness.ports import free_ports

pytestmark = pytest.mark.timeout(180)

ADMIN = "tls-admin-token"
AUTH_TOML = f'\n[auth]\nadmin_token_sha256 = ["{hashlib.sha256(ADMIN.encode()).hexdigest()}"]\n'


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca_and_cert(folder: Path) -> dict[str, Path]:
    """A CA and one server certificate for 127.0.0.1 signed by it, as PEM files."""
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("tsched test CA"))
          .issuer_name(_name("tsched test CA")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(1))
          .not_valid_after(now + dt.timedelta(2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                       False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name("127.0.0.1")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(1)).not_valid_after(now + dt.timedelta(2))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    files = {"ca": folder / "ca.pem", "cert": folder / "node.pem", "key": folder / "node.key"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return files


class TlsCluster(Cluster):
    """The real-cluster helper with tls_cert/tls_key on every node and ca_file set."""

    def __init__(self, tmp_path: Path, **kwargs) -> None:
        self.pki = make_ca_and_cert(Path(tmp_path))
        super().__init__(tmp_path, **kwargs)
        self.client.close()
        self.client = httpx.Client(timeout=30, verify=ssl.create_default_context(
            cafile=str(self.pki["ca"])))

    def _write_config(self, secret, extra_toml) -> None:
        lines = ["[cluster]", 'name = "tls"', 'ca_file = "ca.pem"']
        for i in self.ids:
            lines += ["", "[[node]]", f'id = "{i}"', f'raft = "{self.raft[i]}"',
                      f'http = "{self.http[i]}"', f'data_dir = "data/{i}"',
                      'tls_cert = "node.pem"', 'tls_key = "node.key"']
        self.config_path.write_text("\n".join(lines) + "\n" + extra_toml)

    def url(self, node_id: str) -> str:
        return f"https://{self.http[node_id]}"


@pytest.fixture(scope="module")
def tc(tmp_path_factory):
    with TlsCluster(tmp_path_factory.mktemp("tls"), extra_toml=AUTH_TOML,
                    status_token=ADMIN) as c:
        c.start()
        c.leader = c.wait_leader()
        c.follower = c.followers(c.leader)[0]
        yield c


def test_nodes_serve_https_and_verify_each_other(tc):
    auth = {"Authorization": f"Bearer {ADMIN}"}
    status, body = tc.call(tc.follower, "GET", "/v1/cluster", headers=auth)
    assert status == 200, body
    assert all(n["reachable"] for n in body["nodes"]), body    # peers asked over HTTPS
    status, task = tc.call(tc.follower, "POST", "/v1/tasks", {"task_type": "tls"}, headers=auth)
    assert status == 201, task
    claim = {"worker_id": "w", "task_types": ["tls"], "max_tasks": 1, "wait_s": 5}
    status, body = tc.call(tc.follower, "POST", "/v1/claims", claim, headers=auth)
    assert status == 200 and [t["task_id"] for t in body["tasks"]] == [task["task_id"]], body
    status, body = tc.call(tc.follower, "GET",
                           f"/v1/tasks/{task['task_id']}?consistency=linearizable", headers=auth)
    assert status == 200 and body["state"] == "running", body


def test_plain_http_and_unverified_clients_are_refused(tc):
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://{tc.http[tc.leader]}/healthz", timeout=5)
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"https://{tc.http[tc.leader]}/healthz", timeout=5)


def test_client_and_tsctl_verify_with_a_ca_file(tc, monkeypatch):
    urls = [tc.url(i) for i in tc.ids]
    with Client(urls, token=ADMIN, ca_file=str(tc.pki["ca"])) as client:
        task = client.submit("tls-client", {"n": 1})
        assert client.get(task["task_id"])["payload"] == {"n": 1}
    asyncio.run(_async_client_over_tls(urls, task["task_id"], str(tc.pki["ca"])))
    monkeypatch.setenv("TSCTL_CA_FILE", str(tc.pki["ca"]))
    result = CliRunner().invoke(tsctl, ["--url", ",".join(urls), "--token", ADMIN, "--json",
                                        "get", task["task_id"]])
    assert result.exit_code == 0, result.output
    monkeypatch.delenv("TSCTL_CA_FILE")
    result = CliRunner().invoke(tsctl, ["--url", urls[0], "--token", ADMIN, "--timeout", "1",
                                        "get", task["task_id"]])
    assert result.exit_code == 3, result.output      # no node answered in a way it trusts


async def _async_client_over_tls(urls: list[str], task_id: str, ca_file: str) -> None:
    async with AsyncClient(urls, token=ADMIN, ca_file=ca_file) as client:
        assert (await client.get(task_id))["payload"] == {"n": 1}
    # System trust only. Room for a handshake on a loaded machine: a deadline of 1 s once
    # ran out before any node's certificate was refused.
    async with AsyncClient(urls, token=ADMIN, timeout_s=5) as client:
        with pytest.raises(Unavailable, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get(task_id)


def test_tsnode_refuses_missing_or_half_tls_settings(tmp_path):
    raft, http = free_ports(2)
    base = (f'[cluster]\nname = "t"\n[[node]]\nid = "n1"\nraft = "127.0.0.1:{raft}"\n'
            f'http = "127.0.0.1:{http}"\ndata_dir = "d"\n')
    for extra, message in (('tls_cert = "none.pem"\ntls_key = "none.key"\n', "does not exist"),
                           ('tls_cert = "none.pem"\n', "go together")):
        cfg = tmp_path / "c.toml"
        cfg.write_text(base + extra)
        proc = subprocess.run([TSNODE, "--config", str(cfg), "--id", "n1"], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
