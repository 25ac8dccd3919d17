"""configs/monitoring/: the alert rules pass `promtool check rules` and their own unit tests
(`promtool test rules`; a rule with a wrong threshold fails them), the example Prometheus
configuration passes `promtool check config`, and the dashboard and the rules query only
metrics a live daemon exports. The promtool tests are skipped where promtool is missing
(`apt-get install prometheus`; CI installs it)."""

import json
import re
import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml
from daemon_harness import SAFE_PLANT, Daemon, objective

MONITORING = Path(__file__).resolve().parents[1] / "configs" / "monitoring"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not found (apt-get "
                                    "install prometheus): the alert-rule checks need it")


def _promtool(*args, cwd=MONITORING):
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@needs_promtool
@pytest.mark.parametrize("args", [("check", "rules", "alerts.yaml"),
                                  ("test", "rules", "alerts.test.yaml"),
                                  ("check", "config", "prometheus.yaml")])
def test_promtool_accepts_the_shipped_files(args):
    out = _promtool(*args)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


@needs_promtool
def test_the_rule_tests_fail_for_a_rule_that_never_fires(tmp_path):
    for name in ("alerts.yaml", "alerts.test.yaml"):
        shutil.copy(MONITORING / name, tmp_path / name)
    rules = tmp_path / "alerts.yaml"
    rules.write_text(rules.read_text().replace("increase(tvbod_resets_total[1h]) > 5",
                                               "increase(tvbod_resets_total[1h]) > 500"))
    out = _promtool("test", "rules", "alerts.test.yaml", cwd=tmp_path)
    assert out.returncode != 0 and "TvbodResetBurst" in out.stdout + out.stderr


def _dashboard_exprs() -> list[str]:
    board = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in board["panels"]:
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}" and p["targets"], p["title"]
        assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
    variables = [v["query"]["query"] for v in board["templating"]["list"]]
    return [t["expr"] for p in board["panels"] for t in p["targets"]] + variables


def _rule_exprs() -> list[str]:
    groups = yaml.safe_load((MONITORING / "alerts.yaml").read_text())["groups"]
    return [r["expr"] for g in groups for r in g["rules"]]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The metric names a live daemon with a `safety:` plant exports after one step."""
    pytest.importorskip("prometheus_client")  # `make test` installs the metrics extra
    root = tmp_path_factory.mktemp("live")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = Daemon(root, {"alpha": {}, "beta": {}}, extra=f"metrics: {{port: {port}}}\n")
    (root / "plants" / "alpha.yaml").write_text(SAFE_PLANT)
    d.start()
    try:
        with d.client() as c:
            p = c.ask()
            c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        assert d.stop() == 0
    return set(re.findall(r"^(tvbod_\w+)", text, re.M))


@pytest.mark.parametrize("source", ["dashboard", "rules"])
def test_every_query_names_only_metrics_the_daemon_exports(exported, source):
    exprs = _dashboard_exprs() if source == "dashboard" else _rule_exprs()
    named = {m for e in exprs for m in re.findall(r"\btvbod_\w+", e)}
    assert named and named <= exported, named - exported
    assert {"tvbod_request_duration_seconds_bucket", "tvbod_plant_safe_fraction"} <= exported
