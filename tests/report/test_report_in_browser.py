"""`tvbod report`'s page in a real browser: headless Chromium (Debian's `chromium` package) loads
the file offline, takes a screenshot, and the page rendered: not blank, the plant's name and a
reset marker present, nothing on the console (the page runs no script and loads nothing, so any
console line is a fault: a blocked fetch, a parse error). Skipped where Chromium is missing
(`apt-get install chromium`; CI installs it)."""

import shutil
import subprocess
import sys

import numpy as np
import pytest
from daemon_harness import Daemon, objective

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                "(apt-get install chromium): the report's browser test needs it")
Image = pytest.importorskip("PIL.Image")  # ships with matplotlib, the `plots` extra

#: The reset marker's colour (tvbod/report/svg.py, COLORS["reset"]).
RESET_RGB = (0xD6, 0x27, 0x28)


def chromium(url: str, profile, *args: str) -> subprocess.CompletedProcess:
    """One headless Chromium run as the machine allows it: no sandbox (root), no GPU, and none of
    the background connections a closed network refuses; console messages go to stderr."""
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         "--hide-scrollbars", *args, url],
        capture_output=True, text=True, timeout=180)


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def rendered(page, tmp_path) -> tuple[str, "Image.Image", list[str]]:
    """(the DOM after load, the screenshot, console lines of both runs)."""
    url = page.resolve().as_uri()
    dom = chromium(url, tmp_path / "p1", "--dump-dom")
    shot = tmp_path / "shot.png"
    pic = chromium(url, tmp_path / "p2", "--window-size=1040,1400", f"--screenshot={shot}")
    assert dom.returncode == 0 and pic.returncode == 0, dom.stderr[-2000:] + pic.stderr[-2000:]
    return dom.stdout, Image.open(shot).convert("RGB"), console_lines(dom.stderr + pic.stderr)


def test_the_report_renders_in_chromium_with_the_name_a_reset_and_no_console_output(tmp_path):
    d = Daemon(tmp_path / "d").start()
    with d.client() as c:
        for _ in range(22):  # the objective jumps at t = 15: the trigger resets
            p = c.ask()
            c.tell(p["proposal_id"], objective(p["gains"], p["t"]))
    assert d.stop() == 0
    assert any(e["event"] == "reset" for e in d.events())
    page = tmp_path / "alpha.html"
    out = subprocess.run([sys.executable, "-m", "tvbod", "report", str(d.state / "plants" / "alpha"),
                          "--out", str(page), "--config", str(d.root / "tvbod.yaml")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    dom, shot, console = rendered(page, tmp_path)
    assert console == []
    assert '<h1 id="plant-name">alpha</h1>' in dom and 'class="reset-marker"' in dom
    pixels = np.asarray(shot).reshape(-1, 3).astype(int)
    assert len(np.unique(pixels, axis=0)) > 50  # text, axes and series, not a blank page
    assert (pixels != 255).any(axis=1).mean() > 0.02
    near = (np.abs(pixels - RESET_RGB) <= 40).all(axis=1).sum()
    assert near > 30  # a reset line drawn in its colour


def test_the_console_check_sees_a_script_error_and_a_blocked_fetch(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text('<!doctype html><meta http-equiv="Content-Security-Policy" '
                    "content=\"img-src data:\"><h1>bad</h1>"
                    '<img src="http://203.0.113.1/x.png"><script>console.error("boom")</script>')
    _, _, console = rendered(page, tmp_path)
    assert any("boom" in line for line in console)
    assert any("Content Security Policy" in line for line in console)
