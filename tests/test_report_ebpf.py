"""The report's eBPF section, histograms, timeline picture and run options (issue 24.3).

The HTML eBPF section is built from the console's own blocks (one source); histograms keep their
empty log buckets; the timeline's tracks and hand-off ticks are checked against rows whose
hand-offs are known by construction.
"""

from __future__ import annotations

import io
import itertools
import json

from factories import family_entry, op_intervals, queue_section, queue_summary, run_result

THREAD = {
    "tid": 4242,
    "comm": "aorta-hwq0",
    "queue": 0,
    "helper_of_queue": None,
    "submitter": False,
    "streams": [0, 2],
    "submissions": 9,
    "dispatches": 9,
    "submit_to_dispatch_avg_us": 1270.613,
    "submit_to_dispatch_p99_us": 5148.508,
    "on_cpu_ms": 10.54,
    "kernel_run_delay_ms": 15.8,
    "switches": 21,
    "involuntary": 12,
    "cpus": [0, 1],
}


def _traced_run(helper_errors: dict[str, int]) -> dict:
    section = queue_section("cpu_sched", p99_us=3830.94, metrics={"threads": [THREAD]})
    section["map_capacity"] = {
        "keys_max": 65536,
        "dropped_updates": {},
        "dropped_updates_total": 0,
        "full_maps": {},
        "other_helper_errors": helper_errors,
    }
    return run_result(streams=4, ebpf_queue_metrics=section)


def _console_text(result: dict) -> str:
    from rich.console import Console

    from aorta.hw_queue_eval.report.ebpf_blocks import render_ebpf

    console = Console(file=io.StringIO(), width=200, color_system=None)
    render_ebpf(result, console)
    return console.file.getvalue()


def test_html_ebpf_section_is_the_console_blocks_with_units():
    from aorta.hw_queue_eval.report.html import run_page

    result = _traced_run({"map_delete_elem -2": 216})
    body, _, _ = run_page(result)
    section = body[body.index("<h2>eBPF</h2>") :]
    assert "<h3>eBPF DRIVER-LEVEL QUEUE METRICS</h3>" in section
    assert "<td>Submit→dispatch P99</td><td>3830.9 us</td>" in section
    assert "submit_to_dispatch_p99" not in section  # no flattened JSON keys
    # the per-thread table: real cells, the console's headers
    assert "<th>s→d p99</th>" in section and "<td>≈5148.5us</td>" in section and "<td>0,2</td>" in section
    # harmless ENOENT deletes are not shown as errors, in HTML or on the console
    assert "map_delete_elem" not in section and "Helper errors" not in section
    assert "map_delete_elem" not in _console_text(result)


def test_helper_errors_that_mean_something_are_shown_and_explained():
    from aorta.hw_queue_eval.report.html import run_page

    result = _traced_run({"map_delete_elem -2": 216, "probe_read -14": 3})
    body, _, _ = run_page(result)
    assert "<td>Helper errors</td><td>probe_read -14: 3 (failed bpftrace helper calls" in body
    assert "map_delete_elem" not in body
    assert "Helper errors:        probe_read -14: 3 (failed" in _console_text(result)


def test_console_thread_table_keeps_its_columns():
    text = _console_text(_traced_run({}))
    assert "     queue streams        tid   subm   disp   s→d avg    s→d p99   on-CPU" in text
    # the row records no P99 method: a histogram estimate, marked ≈
    assert "        q0 0,2           4242      9      9  1270.6us  ≈5148.5us   10.5ms   15.8ms     21" in text


def test_histogram_keeps_empty_log_buckets_on_a_log_axis_with_units():
    from aorta.ebpf import hist
    from aorta.hw_queue_eval.report.plots import complete_buckets, histogram_figure

    # log-linear buckets 40, 41 and 47 (2–16 µs) printed (bpftrace prints only non-empty ones)
    printed = []
    for index, count in ((40, 5), (41, 2), (47, 1)):
        low, high = hist.loglinear_bounds(index)
        printed.append({"min": low, "max": high - 1, "count": count})
    spans = complete_buckets(printed)
    assert [hist.loglinear_index(low) for low, _, _ in spans] == list(range(40, 48))
    assert [c for _, _, c in spans] == [5, 2, 0, 0, 0, 0, 0, 1]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # contiguous
    # log2 buckets (bpftrace hist()): powers of two, the missing ones filled
    log2 = complete_buckets([{"min": 1024, "max": 2047, "count": 3}, {"min": 8192, "max": 16383, "count": 1}])
    assert [(low, c) for low, _, c in log2] == [(1024, 3), (2048, 0), (4096, 0), (8192, 1)]

    fig = histogram_figure("families.cpu_sched.metrics.submit_to_dispatch_hist_ns", printed)
    ax = fig.axes[0]
    bars = ax.patches
    assert len(bars) == 8 and [b.get_height() for b in bars] == [5, 2, 0, 0, 0, 0, 0, 1]
    assert ax.get_xscale() == "log"
    assert ax.get_xlabel() == "submit to dispatch (µs, log scale)"
    low, high = hist.loglinear_bounds(40)
    assert bars[0].get_x() == low / 1e3 and abs(bars[0].get_width() - (high - low) / 1e3) < 1e-9


def _timeline_result() -> dict:
    """2 streams on 1 queue, 2 iterations. Iteration 0: s0's op A is handed to the idle queue at
    100 µs; s1's op B becomes ready at 150 µs while A runs (no hand-off); s0's op C is queued
    behind A (ready = A's end, no hand-off); the queue is idle from 400 µs and s1's op D, ready
    at 500 µs, is a hand-off. Iteration 1 (the longer one) is not the median's."""
    rows = [
        # iteration, stream, queue, label, ready, start, end
        [0, 0, 0, 0, 100.0, 110.0, 200.0],
        [0, 1, 0, 1, 150.0, 200.0, 300.0],
        [0, 0, 0, 0, 200.0, 300.0, 400.0],
        [0, 1, 0, 1, 500.0, 510.0, 600.0],
        [1, 0, 0, 0, 1000.0, 1010.0, 3000.0],
        [1, 1, 0, 1, 1000.0, 3000.0, 5000.0],
        [2, 0, 0, 0, 6000.0, 6010.0, 9000.0],
    ]
    return run_result(
        streams=2,
        pool_size=1,
        op_intervals=op_intervals(rows, ["gemm", "tiny_add"]),
        iteration_times_ms=[1.0, 4.0, 3.0],
    )


def test_timeline_tracks_and_handoffs_from_known_rows():
    from aorta.hw_queue_eval.report.timeline import HANDOFF_LANE, handoff_times, select_slice, timeline_figure

    result = _timeline_result()
    table = result["op_intervals"]
    rows = [dict(zip(table["columns"], r, strict=True)) for r in table["rows"] if r[0] == 0]
    assert handoff_times(rows) == [100.0, 500.0]
    part = select_slice(result)
    assert part.iteration == 2  # spans 0.5, 4.0 and 3.0 ms: the median is iteration 2's
    part = select_slice(result, slice_ms=1.0)
    assert (part.start_ms, part.end_ms) == (6.0, 7.0)
    assert part.lanes["s0"] == [(6.01, 7.0 - 6.01, 0)]  # cut at the slice's end
    fig, caption = timeline_figure(result)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["s0", "s1", "q0", HANDOFF_LANE]
    lanes = {c.get_gid() for c in ax.collections}
    assert lanes == {"s0", "q0"}  # iteration 2 has one op, on s0 / q0
    (ticks,) = [line for line in ax.lines if line.get_gid() == HANDOFF_LANE]
    assert list(ticks.get_xdata()) == [6.0]
    assert "worker on-CPU time: not in this file" in caption


def test_timeline_png_has_distinct_lanes(tmp_path):
    import numpy as np
    from PIL import Image

    from aorta.hw_queue_eval.report import timeline

    result = _timeline_result()
    # the first iteration (4 ops, 2 hand-offs) is the median once iteration 1 is dropped
    result["op_intervals"]["rows"] = [r for r in result["op_intervals"]["rows"] if r[0] != 1]
    png, _ = timeline.timeline_png(result)
    assert png is not None and len(png) > 5_000
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=int)
    colours = {name: np.array(rgb) for name, rgb in (("gemm", (31, 119, 180)), ("tiny", (255, 127, 14)))}
    rows_with = {
        name: {y for y in range(pixels.shape[0]) if (np.abs(pixels[y] - rgb).sum(axis=1) < 30).sum() > 20}
        for name, rgb in colours.items()
    }
    # gemm bars sit on the s0 and q0 lanes, tiny_add bars on s1 and q0: both colours drawn,
    # on pixel rows that are not all the same (distinct lanes)
    assert rows_with["gemm"] and rows_with["tiny"]
    assert rows_with["gemm"] != rows_with["tiny"]
    assert len(rows_with["gemm"] | rows_with["tiny"]) > 40


ORIGIN = 7_000_000_000  # window_start_monotonic_ns of the synthetic traced run


def _traced_timeline_result() -> dict:
    """_timeline_result (its median iteration 2 spans 6.0-9.0 ms) with the eBPF timeline a
    --ebpf-trace --trace-out run keeps: worker 200 (queue 0) on CPU 5.5-6.5 ms (clipped to start
    at 6.0) and 7.0-8.0 ms, and 10-11 ms (after the slice: not drawn); the host 100 on CPU 6.2-6.4 ms;
    doorbell writes at 6.1 ms (drawn) and 9.5 ms (after the slice)."""
    ns = lambda ms: ORIGIN + int(ms * 1e6)  # noqa: E731
    tl = {
        "threads": [{"tid": 100, "label": "host", "queue": None}, {"tid": 200, "label": "q0", "queue": 0}],
        "on_cpu": {
            "rows": [
                [200, ns(5.5), ns(6.5), None],
                [100, ns(6.2), ns(6.4), 200_000],
                [200, ns(7.0), ns(8.0), 1_000_000],
                [200, ns(10.0), ns(11.0), 1_000_000],
            ],
            "seen": 7,
            "kept": 4,
            "dropped": 3,
        },
        "doorbells": {"rows": [[0, 0, 100, ns(6.1), ns(6.2)], [0, 1, 100, ns(9.5), None]]},
    }
    result = _timeline_result()
    result["ebpf_queue_metrics"] = queue_section("cpu_sched", submissions=2, metrics={"timeline": tl})
    result["metadata"] = {**(result.get("metadata") or {}), "window_start_monotonic_ns": ORIGIN}
    return result


def test_timeline_draws_worker_on_cpu_slices_from_the_ebpf_timeline():
    from aorta.hw_queue_eval.report.timeline import DOORBELL_LANE, HANDOFF_LANE, select_slice, timeline_figure

    result = _traced_timeline_result()
    part = select_slice(result)
    assert (part.start_ms, part.end_ms) == (6.0, 9.0)

    def close(got, want):
        pairs = zip(got, want, strict=True) if len(got) == len(want) else None
        return pairs is not None and all(abs(a - c) < 1e-9 and abs(b - d) < 1e-9 for (a, b), (c, d) in pairs)

    assert list(part.on_cpu) == ["q0 200 on CPU", "host 100 on CPU"]  # workers first
    assert close(part.on_cpu["q0 200 on CPU"], [(6.0, 0.5), (7.0, 1.0)])
    assert close(part.on_cpu["host 100 on CPU"], [(6.2, 0.2)])
    assert [round(t, 9) for t in part.doorbells_ms] == [6.1]
    fig, caption = timeline_figure(result)
    ax = fig.axes[0]
    names = ["s0", "s1", "q0", HANDOFF_LANE, "q0 200 on CPU", "host 100 on CPU", DOORBELL_LANE]
    assert [t.get_text() for t in ax.get_yticklabels()] == names
    bars = {c.get_gid(): c for c in ax.collections}
    assert set(bars) == {"s0", "q0", "q0 200 on CPU", "host 100 on CPU"}
    (bells,) = [line for line in ax.lines if line.get_gid() == DOORBELL_LANE]
    assert [round(t, 9) for t in bells.get_xdata()] == [6.1]
    assert list(bells.get_ydata()) == [names.index(DOORBELL_LANE)]
    assert "on-CPU slices of 2 traced threads and 1 doorbell writes" in caption
    assert "3 slices past its cap not kept" in caption
    assert "not in this file" not in caption


def _plot_area_pixels(result: dict):
    """RGB pixels of the timeline PNG's plot area (not its title, tick labels or legend)."""
    import numpy as np
    from PIL import Image

    from aorta.hw_queue_eval.report import plots, timeline

    fig, _ = timeline.timeline_figure(result)
    png = plots.png_of(fig)
    box = fig.axes[0].get_window_extent()
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=int)
    height = pixels.shape[0]
    return pixels[int(height - box.y1) + 2 : int(height - box.y0) - 2, int(box.x0) + 2 : int(box.x1) - 2]


def test_timeline_png_on_cpu_lanes_sit_below_the_queues():
    import numpy as np

    def rows_of(pixels, rgb):
        return sorted(np.nonzero((np.abs(pixels - np.array(rgb)).sum(axis=2) < 12).sum(axis=1) > 20)[0])

    pixels = _plot_area_pixels(_traced_timeline_result())
    gemm, grey = rows_of(pixels, (31, 119, 180)), rows_of(pixels, (89, 89, 89))  # C0, on-CPU grey
    assert gemm and grey
    assert min(grey) > max(gemm)  # on-CPU lanes are drawn under the stream and queue lanes
    # two on-CPU lanes with a gap between them: the grey rows are not one contiguous band
    assert any(b - a > 1 for a, b in itertools.pairwise(grey))
    without = _traced_timeline_result()
    del without["ebpf_queue_metrics"]
    assert rows_of(_plot_area_pixels(without), (31, 119, 180))
    assert not rows_of(_plot_area_pixels(without), (89, 89, 89))


def test_sweep_run_options_show_the_values_the_points_ran_with():
    from aorta.hw_queue_eval.report.html import run_option_rows

    point = {"key": {"streams": 2}, "status": "ok", "result": run_result(streams=2, size="small")}
    sweep = {"run_options": {"iterations": 5, "size": None, "device": "auto"}, "points": [point]}
    rows = dict(run_option_rows(sweep))
    assert rows["iterations"] == 5
    assert rows["size"] == "small (default: as the points ran)"
    assert rows["device"] == "cpu (auto: as the points ran)"
    assert "None" not in json.dumps(rows)
    empty = dict(run_option_rows({"run_options": {"size": None}, "points": []}))
    assert empty["size"] == "default (no point finished to say what it resolved to)"


def test_per_family_table_when_two_families_report():
    from aorta.hw_queue_eval.report.html import run_page

    result = _traced_run({})
    families = result["ebpf_queue_metrics"]["families"]
    families["amdgpu"] = family_entry(
        {"summary": queue_summary("amdgpu", submissions=7, avg_us=12.5, p99_us=40.0, rings=(0, 1))},
        ["amdgpu:amdgpu_cs_ioctl"],
    )
    body, _, _ = run_page(result)
    assert "<th>family</th><th>submissions</th>" in body
    assert "<tr><td>amdgpu</td><td>7</td><td>7</td><td>12.5 us</td><td>40.0 us</td><td>2</td></tr>" in body
    assert "per family (each family's own summary" in _console_text(result)
    one, _, _ = run_page(_traced_run({}))
    assert "<th>family</th>" not in one  # one family: its figures are the block's rows
