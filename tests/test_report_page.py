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
from test_report_ebpf import _traced_timeline_result

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


ON_CPU_RGB = (89, 89, 89)  # report/timeline.ON_CPU_COLOUR, grey 0.35
DOORBELL_RGB = (220, 20, 60)  # the doorbell marker's crimson
GEMM_RGB = (31, 119, 180)  # C0: the gemm label's bars


def _mask(pixels: np.ndarray, rgb: tuple[int, int, int], tolerance: int) -> np.ndarray:
    """Pixels within `tolerance` (sum of channel differences) of `rgb`."""
    return np.abs(pixels - np.array(rgb)).sum(axis=2) < tolerance


def _runs(flags: np.ndarray, min_len: int = 1, bridge: int = 0) -> list[tuple[int, int]]:
    """[first, last] index of each run of True at least `min_len` long, gaps of at most `bridge`
    inside a run ignored (a grid line drawn across a bar)."""
    runs: list[list[int]] = []
    for i in np.flatnonzero(flags).tolist():
        if runs and i - runs[-1][1] <= bridge + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return [(a, b) for a, b in runs if b - a + 1 >= min_len]


def _screenshot(tmp_path, monkeypatch, result: dict) -> tuple[str, np.ndarray]:
    """(DOM, RGB pixels of a WIDTH x HEIGHT screenshot) of `report` on `result` in chromium."""
    from PIL import Image

    from conftest import run_cli_inprocess as run_cli

    path = tmp_path / "run.json"
    path.write_text(json.dumps(result))
    out = tmp_path / "rep"
    proc = run_cli("report", str(path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    monkeypatch.setenv("HOME", str(tmp_path))  # chromium's profile and crash folders go here
    url = (out / "index.html").as_uri()
    dom = _browse(f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url).stdout
    shot = tmp_path / "shot.png"
    _browse(
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}",
        f"--window-size={WIDTH},{HEIGHT}",
        url,
    )
    return dom, np.asarray(Image.open(shot).convert("RGB"), dtype=int)


@pytest.mark.slow
def test_report_page_in_chromium_shows_sections_and_timeline(tmp_path, monkeypatch):
    """A traced run with the eBPF timeline (--trace-out's cpu_sched records): the page's headings
    from the DOM, and from the screenshot's pixels the timeline picture's eBPF lanes, checked
    against the records it was drawn from (_traced_timeline_result: the picture shows 6.0-9.0 ms;
    worker q0 on CPU 6.0-6.5 (clipped) and 7.0-8.0 ms, the host 6.2-6.4 ms, a doorbell write at
    6.1 ms): one grey band per thread, workers first, holding one run of grey per slice, every
    slice edge and the doorbell mark on one linear ms → pixel scale within 2 px, the mark in the
    doorbell lane under the on-CPU lanes."""
    result = _traced_timeline_result()
    lanes = [[(6.0, 6.5), (7.0, 8.0)], [(6.2, 6.4)]]  # q0 200, host 100: ms since the window start
    doorbells, shown = [6.1], (6.0, 9.0)
    dom, pixels = _screenshot(tmp_path, monkeypatch, result)
    titles = [t for _, t in re.findall(r"<h([1-3])>([^<]+)</h\1>", dom)]
    assert "Plots" in titles and "eBPF" in titles
    assert "eBPF DRIVER-LEVEL QUEUE METRICS" in titles and "Histograms" not in titles  # none here
    assert 'data-file="timeline.png"' in dom
    assert pixels.shape[:2] == (HEIGHT, WIDTH)
    # the page drew something: many distinct pixel rows, and the ops' bar colours
    assert len({row.tobytes() for row in pixels}) > 200
    for rgb in (GEMM_RGB, (255, 127, 14)):  # gemm and tiny_add bars
        assert _mask(pixels, rgb, 30).sum() > 500
    # on-CPU lanes: bands of at least 5 rows with a wide stretch of grey (the legend's patch is
    # narrower; a grey rule or text is a row or two)
    grey = _mask(pixels, ON_CPU_RGB, 12)
    bands = _runs(grey.sum(axis=1) > 30, min_len=5)
    assert len(bands) == len(lanes), bands
    edges_px, edges_ms = [], []
    for (top, bottom), spans in zip(bands, lanes, strict=True):
        drawn = _runs(grey[top : bottom + 1].any(axis=0), min_len=8, bridge=2)  # not the lane's name
        assert len(drawn) == len(spans), (drawn, spans)  # one run of grey per slice
        for (x0, x1), (start, end) in zip(drawn, spans, strict=True):
            edges_px += [x0, x1 + 1]
            edges_ms += [start, end]
    scale, offset = np.polyfit(edges_ms, edges_px, 1)
    assert scale > 100  # px per ms: the 3 ms slice fills most of the page's width
    assert np.abs(np.polyval([scale, offset], edges_ms) - edges_px).max() <= 2
    # the queue lanes' gemm bars are drawn right above the on-CPU lanes
    assert (_mask(pixels[bands[0][0] - 150 : bands[0][0]], GEMM_RGB, 30).sum(axis=1) > 300).any()
    # doorbell marks: crimson inside the plot's x range (not the legend's), all under the last
    # on-CPU lane (the doorbell lane is the picture's last)
    plot_x = np.polyval([scale, offset], shown).round().astype(int)
    top = bands[-1][0]
    near = _mask(pixels[top : top + 120, plot_x[0] : plot_x[1]], DOORBELL_RGB, 40)
    assert near.sum() > 10 and top + np.flatnonzero(near.any(axis=1)).min() > bands[-1][1]
    marks = _runs(near.any(axis=0))
    assert len(marks) == len(doorbells), marks
    for (x0, x1), at in zip(marks, doorbells, strict=True):
        assert abs(plot_x[0] + (x0 + x1) / 2 - np.polyval([scale, offset], at)) <= 2
