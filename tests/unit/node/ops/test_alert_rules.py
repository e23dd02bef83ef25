"""The shipped alert rules (deploy/alerts.yml, DESIGN 14.4) pass their own unit tests with
Prometheus' promtool, and alert on the metrics the node exports."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tsched.node.ops.metrics import NodeMetrics
from tsched.statemachine.tiers import DEFAULT_TIERS

DEPLOY = Path(__file__).resolve().parents[4] / "deploy"
EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "prometheus"


@pytest.mark.parametrize("folder, rules, tests", [
    (DEPLOY, "alerts.yml", "alerts_test.yml"),
    (EXAMPLES, "tsched-alerts.yml", "tsched-alerts.test.yml")])
def test_promtool_accepts_the_rules_and_their_tests_pass(folder, rules, tests) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing in CI: .ci/run installs Debian's prometheus")
        pytest.skip("promtool is not installed (Debian package prometheus); .ci/run installs it")
    check = subprocess.run([promtool, "check", "rules", rules], cwd=folder,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run([promtool, "test", "rules", tests], cwd=folder,
                          capture_output=True, text=True, timeout=120)
    assert test.returncode == 0, test.stdout + test.stderr


def test_every_metric_the_rules_use_is_exported_by_a_node() -> None:
    rules = (DEPLOY / "alerts.yml").read_text()
    used = set(re.findall(r"\b(tsched_[a-z_]+)", rules))
    exported = NodeMetrics().render().decode()
    names = set(re.findall(r"^# TYPE (\S+) ", exported, re.M))
    names |= {n + suffix for n in names for suffix in ("_total", "_bucket")}
    # gauges computed from a replica appear once a node is attached: the queue and Raft ones
    attached_only = {"tsched_tenant_tasks", "tsched_tenant_oldest_due_task_age_seconds",
                     "tsched_raft_has_leader", "tsched_tasks",
                     "tsched_oldest_claimable_task_age_seconds"}
    assert used - attached_only <= names, used - attached_only - names
    # TschedTierLate selects the lateness histogram's tier label, one rule per tier with an
    # SLA in the default table
    assert re.findall(r'\btier="(\w+)"', exported) and "tier" in rules
    with_sla = {t.name for t in DEFAULT_TIERS if t.sla_s is not None}
    assert set(re.findall(r'lateness_seconds_bucket\{tier="(\w+)"\}', rules)) == with_sla
    for tier in DEFAULT_TIERS:
        if tier.sla_s is not None:
            assert re.search(rf'tier="{tier.name}"\}}\[5m\]\)\)\) > {tier.sla_s:g}\n', rules)
    source = (Path(__file__).resolve().parents[4] / "node" / "ops" / "scrape.py").read_text()
    for name in attached_only:
        assert f'"{name}"' in source


def test_the_operations_guide_says_what_to_do_for_every_rule() -> None:
    rules = set(re.findall(r"- alert: (\w+)", (DEPLOY / "alerts.yml").read_text()))
    guide = (DEPLOY.parent / "docs" / "operations.md").read_text()
    section = guide[guide.index("### 5.1 When an alert"):guide.index("## 6.")]
    assert {r for r in rules if f"`{r}" not in section} == set()
