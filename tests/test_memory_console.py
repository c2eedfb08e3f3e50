"""The "eBPF MEMORY METRICS:" block: the guide's labels, n/a for unmeasured, the aliases' meaning."""

from __future__ import annotations

import io

from rich.console import Console

from aorta.hw_queue_eval.report.ebpf_memory import render_memory_block

GUIDE_LABELS = [
    "BO moves (migrations):",
    "Migration volume:",
    "BO maps / unmaps:",
    "Evictions / restores:",
    "Eviction rate:",
    "Avg evict latency:",
]


def _text(section: dict) -> str:
    buf = io.StringIO()
    render_memory_block(section, Console(file=buf, width=200, highlight=False, soft_wrap=True))
    return buf.getvalue()


def test_guide_block_with_measured_numbers():
    text = _text(
        {
            "status": "ok",
            "bo_moves": 42,
            "bo_moves_per_sec": 350.0,
            "migration_volume_mb": 64.0,
            "bo_maps": 120,
            "bo_unmaps": 100,
            "evictions": 4,
            "restores": 4,
            "eviction_rate_per_sec": 0.5,
            "avg_evict_to_restore_us": 8.2,
            "restore_delay": {
                "note": "evict→restore time is mostly the driver's fixed restore delay (25 jiffies = 100 ms)"
            },
            "host_page_faults": 10,
            "host_page_faults_per_sec": 5.0,
            "host_memcg_reclaim_episodes": 3,
            "host_memcg_reclaim_ms": 1.5,
            "lost_events": 0,
            "window": {"duration_ms": 2000.0},
        }
    )
    assert "eBPF MEMORY METRICS:" in text
    for label in GUIDE_LABELS:
        assert label in text
    assert "42  (350.0 /sec)" in text
    assert "64.0 MB" in text
    assert "120 / 100" in text
    assert "4 / 4" in text
    assert "0.50 /sec" in text
    assert "8.2 us" in text
    assert "fixed restore delay" in text
    assert "3 episodes, 1.50 ms stalled" in text
    assert "not GPU page faults" in text


def test_unmeasured_gpu_numbers_print_na_not_zero():
    text = _text(
        {
            "status": "ok",
            "bo_moves": None,
            "evictions": None,
            "lost_events": 0,
            "gpu_memory_reason": "bo_moves: amdgpu_bo_move not attached",
            "host_page_faults": 0,
            "window": {"duration_ms": 10.0},
        }
    )
    line = next(x for x in text.splitlines() if "BO moves (migrations):" in x)
    assert "n/a" in line
    assert " 0" not in line
    assert "amdgpu_bo_move not attached" in text


def test_tracing_off_says_why():
    text = _text({"status": "unavailable", "error": "bpftrace not found"})
    assert "bpftrace not found" in text
