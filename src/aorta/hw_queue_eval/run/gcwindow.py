"""Python's cyclic garbage collector kept out of the measurement window.

With torch imported a process tracks ~170 k objects, so a full (generation 2) collection takes
60–160 ms on this kind of machine, as long as a whole CPU window (docs/metrics.md, "Run-to-run
noise"). When it fires depends on how many objects the run allocated before, so it lands inside
some runs' windows and not others': the largest single source of run-to-run noise found on the
CPU backend. The harness therefore collects once right before the last warm-up iteration (one
iteration re-warms the caches the collection evicted) and disables automatic collection until the
window (and the uninstrumented window, when measured) is over, then counts the cyclic garbage
left meanwhile (freed then), so the result says what was deferred. Reference counting, which
frees almost everything a workload allocates, is unaffected.
"""

from __future__ import annotations

import gc
import time

from aorta.hw_queue_eval.results.models import GcWindow


class QuietGc:
    """Collect before the window, no automatic collection inside it, report what was deferred."""

    def __init__(self) -> None:
        self._was_enabled = False
        self._collected_before = 0
        self._collect_ms = 0.0
        self._active = False

    def start(self) -> None:
        """Full collection now (before the last warm-up iteration), then automatic collection off."""
        self._was_enabled = gc.isenabled()
        started = time.perf_counter_ns()
        self._collected_before = gc.collect()
        self._collect_ms = (time.perf_counter_ns() - started) / 1e6
        gc.disable()
        self._active = True

    def stop(self) -> GcWindow:
        """Collect the window's cyclic garbage, restore the collector; the result's `gc` entry."""
        if not self._active:
            return GcWindow(
                disabled_in_window=False,
                reason="the window did not start, so the collector was not touched",
            )
        self._active = False
        deferred = gc.collect()
        if self._was_enabled:
            gc.enable()
        return GcWindow(
            disabled_in_window=True,
            collected_before_window=self._collected_before,
            collect_before_window_ms=round(self._collect_ms, 3),
            cyclic_garbage_after_window=deferred,
            meaning=(
                "automatic cyclic GC off from the last warm-up iteration to the end "
                "of the measured window(s), after one full collection; "
                "cyclic_garbage_after_window = objects it would have had to collect "
                "meanwhile, freed right after"
            ),
        )

    def abort(self) -> None:
        """Restore the collector on an error path (nothing to report)."""
        if self._active:
            self._active = False
            if self._was_enabled:
                gc.enable()
