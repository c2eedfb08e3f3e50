"""Every standalone bpftrace script has a current example output beside it
(scripts/bt_examples.py): made from this very script, showing every map it prints."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import load_file_module

REPO = Path(__file__).resolve().parents[1]
bt_examples = load_file_module(REPO / "scripts" / "bt_examples.py")


def test_every_script_has_a_current_example() -> None:
    assert len(list(bt_examples.SCRIPTS.glob("*_example.txt"))) == len(list(bt_examples.SCRIPTS.glob("*.bt")))
    assert bt_examples.problems() == []


def test_a_changed_script_or_a_lost_map_makes_its_example_stale(tmp_path: Path) -> None:
    for path in bt_examples.SCRIPTS.glob("cpu_oncpu_threads*"):
        shutil.copy(path, tmp_path / path.name)
    assert bt_examples.problems(tmp_path) == []
    script = tmp_path / "cpu_oncpu_threads.bt"
    script.write_text(
        script.read_text().replace("@switches[tid, comm] = count();", "@switched[tid] = count();")
    )
    found = bt_examples.problems(tmp_path)
    assert any("older cpu_oncpu_threads.bt" in line for line in found)
    assert any("@switched" in line for line in found)
    (tmp_path / "cpu_oncpu_threads_example.txt").unlink()
    assert any("missing" in line for line in bt_examples.problems(tmp_path))


def test_printed_maps_leave_out_what_end_clears() -> None:
    maps = bt_examples.printed_maps(bt_examples.SCRIPTS / "kfd_queue_ioctls.bt")
    assert maps == ["@calls", "@latency_us"]
