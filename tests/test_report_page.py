"""The HTML report as a person sees it: opened in headless Chromium (Debian's `chromium`), its
headings read back from the rendered DOM and a screenshot checked for the timeline picture.

Skips where chromium is not installed (scripts/setup.sh --test installs it as root), fails in CI.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from conftest import unavailable
from test_report_ebpf import _timeline_result, _traced_run

WIDTH, HEIGHT = 1200, 9000


def _chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        unavailable(
            "chromium not installed (scripts/setup.sh --test installs it as root)",
            "chromium required in CI (scripts/setup.sh --test installs it)",
        )
    return path


def _browse(*args: str) -> subprocess.CompletedProcess:
    """Run headless chromium with a throwaway profile (no sandbox: tests run as root)."""
    return subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )


@pytest.mark.slow
def test_report_page_in_chromium_shows_sections_and_timeline(tmp_path, monkeypatch):
    from PIL import Image

    from conftest import run_cli_inprocess as run_cli

    result = _traced_run({"map_delete_elem -2": 216})
    result["op_intervals"] = _timeline_result()["op_intervals"]
    result["stream_count"] = 2
    path = tmp_path / "run.json"
    path.write_text(json.dumps(result))
    out = tmp_path / "rep"
    proc = run_cli("report", str(path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    monkeypatch.setenv("HOME", str(tmp_path))  # chromium's profile and crash folders go here
    url = (out / "index.html").as_uri()
    dom = _browse(f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url).stdout
    headings = re.findall(r"<h([1-3])>([^<]+)</h\1>", dom)
    titles = [t for _, t in headings]
    assert "Plots" in titles and "eBPF" in titles
    assert "eBPF DRIVER-LEVEL QUEUE METRICS" in titles and "Histograms" not in titles  # none here
    assert 'data-file="timeline.png"' in dom
    shot = tmp_path / "shot.png"
    _browse(
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}",
        f"--window-size={WIDTH},{HEIGHT}",
        url,
    )
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=int)
    assert pixels.shape[:2] == (HEIGHT, WIDTH)
    # the page drew something: many distinct pixel rows, and the timeline's bar colours
    assert len({row.tobytes() for row in pixels}) > 200
    for rgb in ((31, 119, 180), (255, 127, 14)):  # gemm and tiny_add bars
        assert (np.abs(pixels - np.array(rgb)).sum(axis=2) < 30).sum() > 500
