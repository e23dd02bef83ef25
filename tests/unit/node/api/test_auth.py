"""[auth] parsing and token identification (node/api/auth.py); the HTTP rules are tested on a
real cluster in tests/integration/test_auth_cluster.py."""
from __future__ import annotations

import pytest

from tsched.node.api.auth import AuthConfigError, Identity, digest_of, parse


def test_no_auth_section_means_no_auth():
    assert parse(None) is None


def test_tokens_are_identified_by_their_digest():
    auth = parse({"admin_token_sha256": [digest_of("root")],
                  "metrics_token_sha256": [digest_of("scrape")],
                  "tenant_token_sha256": {"acme": [digest_of("a1"), digest_of("a2").upper()]}})
    assert auth.identify("root") == Identity("admin")
    assert auth.identify("scrape") == Identity("metrics")
    assert auth.identify("a1") == auth.identify("a2") == Identity("tenant", "acme")
    assert auth.identify("nobody") is None
    assert auth.identify(digest_of("root")) is None     # the digest itself is no token
    assert auth.identify("\udcff") is None              # undecodable text does not raise


@pytest.mark.parametrize("raw, message", [
    ({}, "no token digests"),
    ({"admin_token_sha256": "abc"}, "must be a list"),
    ({"admin_token_sha256": ["ab"]}, "not a SHA-256 hex digest"),
    ({"admin_token_sha256": ["g" * 64]}, "not a SHA-256 hex digest"),
    ({"admin_token": [digest_of("x")]}, "unknown keys"),
    ({"tenant_token_sha256": ["x"]}, "must be a table"),
    ({"tenant_token_sha256": {"bad tenant": [digest_of("x")]}}, "not a tenant name"),
    ({"admin_token_sha256": [digest_of("x")],
      "tenant_token_sha256": {"acme": [digest_of("x")]}}, "both admin and tenant:acme"),
])
def test_malformed_sections_are_refused_with_the_reason(raw, message):
    with pytest.raises(AuthConfigError, match=message):
        parse(raw)


def test_tsnode_refuses_a_malformed_auth_section(tmp_path):
    from click.testing import CliRunner

    from tsched.node.main import cli
    path = tmp_path / "c.toml"
    path.write_text('[cluster]\nname = "t"\n[[node]]\nid = "a"\nraft = "127.0.0.1:9001"\n'
                    'http = "127.0.0.1:9101"\ndata_dir = "d"\n'
                    '[auth]\nadmin_token_sha256 = ["plaintext-token"]\n')
    result = CliRunner().invoke(cli, ["--config", str(path), "--id", "a"])
    assert result.exit_code == 2
    assert "admin_token_sha256[0] is not a SHA-256 hex digest" in result.output


def test_many_tenant_tokens_are_identified_by_lookup():
    from tsched.node.api.auth import LINEAR_SCAN_MAX
    n = LINEAR_SCAN_MAX * 3
    auth = parse({"tenant_token_sha256": {f"t{i}": [digest_of(f"tok{i}")] for i in range(n)}})
    assert len(auth.entries) > LINEAR_SCAN_MAX
    assert auth.identify(f"tok{n - 1}") == Identity("tenant", f"t{n - 1}")
    assert auth.identify("tok") is None
