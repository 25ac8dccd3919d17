"""The whole system as real processes: the daemon, the cart-pole and temperature adapters, over a
real ipc socket, for a shortened horizon (`tvbod demo` with small settings)."""

import json
import subprocess
import sys

from tvbod.service.event_files import read_events


def test_daemon_and_both_adapters_tune_end_to_end(tmp_path):
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "tvbod", "demo", "--quiet", "--out", str(run_dir),
         "--cartpole-steps", "60", "--jump-at", "30", "--temperature-steps", "30"],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]

    # adapters recorded every step, each told exactly once
    cart = [json.loads(l) for l in (run_dir / "cartpole.jsonl").read_text().splitlines()]
    temp = [json.loads(l) for l in (run_dir / "temperature.jsonl").read_text().splitlines()]
    assert [r["t"] for r in cart] == list(range(1, 61))
    assert [r["t"] for r in temp] == list(range(1, 31))
    assert all(r["regret"] >= -1e-3 for r in cart) and all(r["regret"] >= 0 for r in temp)

    # the daemon's events: the friction jump at t = 30 is caught by a reset soon after
    events = read_events(run_dir / "state" / "plants" / "cartpole" / "events.jsonl")
    resets = [e["t"] for e in events if e["event"] == "reset"]
    assert any(30 <= t <= 45 for t in resets), resets
    measured = [e for e in events if e["event"] == "measurement"]
    assert len({e["proposal_id"] for e in measured}) == 60

    # the final state on disk: a clean stop checkpointed everything, journals are empty
    from tvbod.service.store import PlantStore

    for plant, steps in (("cartpole", 60), ("cartpole-safe", 60), ("temperature", 30)):
        rec = PlantStore(run_dir / "state", plant).recover()
        assert rec.records_after_checkpoint == []
        assert rec.state["strategy"]["t"] == steps + 1 and rec.state["tells"] == steps

    # the demo's own checks: replay verified every history, a report per plant was written
    assert out.stdout.count("steps reproduced exactly") == 3
    assert "cartpole-safe: safety: " in out.stdout
    for plant in ("cartpole", "cartpole-safe", "temperature"):
        page = run_dir / f"{plant}.html"
        assert f"{plant}: report {page}" in out.stdout
        html = page.read_text()
        assert f'<h1 id="plant-name">{plant}</h1>' in html and "Deploy now" in html
    safe = (run_dir / "cartpole-safe.html").read_text()
    assert "share of the gain box the safe set certifies" in safe
    assert 'class="regime-marker"' in (run_dir / "cartpole.html").read_text()  # the jump
    assert "friction jump at t = 30: first reset at t =" in out.stdout
