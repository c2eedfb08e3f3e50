"""`--lock-clocks` / `--power-limit`: change one GPU, verify, and always put it back as found.

Order for every change (side effects are reversible and crash-safe, docs/architecture.md):
1. put back any device left changed by a process that was killed hard (its state file);
2. snapshot the prior state and write it to the state file — before touching anything;
3. note each change in the state file, then make it; read back and verify (failure is an error,
   never a claim of success);
4. restore the prior state (power cap included) in `finally`, with SIGINT/SIGTERM held off until
   the device is back; verify the restore; only then delete the state file.

Which device a --device means and which driver changes it is a GpuLocator: DeviceGpus in
production (the GPU behind torch's device; none on the CPU backend). A caller of the CLI can pass
another one (commands/collaborators.py) — the tests point it at fake vendor tools — and nothing in
the environment or the input selects it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aorta.common import environment
from aorta.common.errors import AortaError, DeviceLeftChanged, UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.gpu import state as gpu_state
from aorta.hw_queue_eval.gpu.drivers import make_driver
from aorta.hw_queue_eval.gpu.drivers.amd_smi import AmdSmi
from aorta.hw_queue_eval.gpu.drivers.base import POWER_TOLERANCE_W, GpuControlError, GpuDriver
from aorta.hw_queue_eval.gpu.drivers.nvidia_smi import NvidiaSmi
from aorta.hw_queue_eval.gpu.drivers.nvml import Pynvml
from aorta.hw_queue_eval.gpu.drivers.rocm_smi import RocmSmi
from aorta.hw_queue_eval.results.run_result import utc_timestamp

CPU_NOT_APPLICABLE = (
    "not applicable on the CPU backend: it has no GPU clocks or power cap to "
    "set (run on a GPU, or drop the clock/power setting)"
)
_VISIBLE_ENV = {
    "nvidia": ("CUDA_VISIBLE_DEVICES",),
    "amd": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
}


@dataclass(frozen=True)
class GpuRequest:
    """What to change: a clock level 0..7 and/or a power cap in watts (None: leave as found)."""

    clock_level: int | None = None
    power_limit_w: float | None = None

    @property
    def empty(self) -> bool:
        return self.clock_level is None and self.power_limit_w is None

    def to_dict(self) -> JsonObject:
        return {"clock_level": self.clock_level, "power_limit_w": self.power_limit_w}


@dataclass(frozen=True)
class GpuTarget:
    """The one device whose clocks/power are changed.

    `simulated`: a stand-in chosen by the caller, not the device the workload runs on (its
    description says so, and so does the policy table).
    """

    vendor: str
    index: int
    simulated: bool = False

    def describe(self) -> str:
        mode = " (simulated: not the device the workload runs on)" if self.simulated else ""
        return f"{self.vendor} GPU {self.index}{mode}"


class GpuLocator(Protocol):
    """Which GPU a resolved --device means, and the driver that reads and changes it."""

    def target_for(self, resolved_device: str) -> GpuTarget | None:
        """The device to control (None: nothing to control, e.g. the CPU backend)."""
        ...

    def driver_for(self, target: GpuTarget) -> GpuDriver:
        """A driver for `target` (its vendor library when importable, else its tool)."""
        ...

    def no_gpu_for(self, device: str) -> bool:
        """True when --device `device` (checked, not resolved) surely means no GPU to control,
        decided without torch; False when only resolving the device can tell."""
        ...


def _physical_index(vendor: str, logical: int) -> int:
    """Map torch's cuda:N to the vendor tool's index through *_VISIBLE_DEVICES if set."""
    for name in _VISIBLE_ENV[vendor]:
        raw = environment.get(name)
        if raw is None or raw.strip() == "":
            continue
        items = [x.strip() for x in raw.split(",") if x.strip()]
        if not all(x.isdigit() for x in items) or logical >= len(items):
            raise UsageError(
                f"cannot tell which physical GPU cuda:{logical} is from "
                f"{name}={raw!r}: use numeric indices to control clocks/power"
            )
        return int(items[logical])
    return logical


def target_for_device(resolved_device: str) -> GpuTarget | None:
    """The device to control for a resolved --device (None on the CPU backend)."""
    if resolved_device == "cpu":
        return None
    import torch

    vendor = "amd" if getattr(torch.version, "hip", None) else "nvidia"
    logical = int(resolved_device.split(":", 1)[1]) if ":" in resolved_device else 0
    return GpuTarget(vendor, _physical_index(vendor, logical), simulated=False)


class DeviceGpus:
    """Production's GpuLocator: the GPU behind torch's device, driven by its vendor's library
    (pynvml / amdsmi) when importable, else by its command-line tool."""

    def target_for(self, resolved_device: str) -> GpuTarget | None:
        return target_for_device(resolved_device)

    def driver_for(self, target: GpuTarget) -> GpuDriver:
        return make_driver(target.vendor, target.index)

    def no_gpu_for(self, device: str) -> bool:
        from aorta.hw_queue_eval.gpu.devnodes import any_gpu_node

        return device == "cpu" or (device == "auto" and not any_gpu_node())


def _driver_for_record(record: JsonObject) -> GpuDriver:
    """The same kind of driver that made the changes recorded in a state file."""
    tool, index = record.get("tool"), int(record["index"])
    if tool == "nvidia-smi":
        return NvidiaSmi(index)
    if tool == "rocm-smi":
        return RocmSmi(index)
    if tool == "pynvml":
        return Pynvml(index)
    if tool == "amdsmi":  # same state as rocm-smi: that tool can put it back without the library
        try:
            import amdsmi  # noqa: F401
        except (ImportError, OSError):
            return RocmSmi(index)
        return AmdSmi(index)
    raise UsageError(f"state file names an unknown tool {tool!r}")


def _close(driver: GpuDriver | None) -> None:
    """Release a library driver (amdsmi_shut_down); command-line drivers have nothing to close."""
    close = getattr(driver, "close", None)
    if close is not None:
        close()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while the device is put back; they are delivered right after."""
    sigs = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def restore_advice(state_dir: str | Path | None) -> str:
    """How to put a device back later: `restore`, with the --state-dir its state file is in."""
    option = "" if state_dir is None else f" --state-dir {state_dir}"
    return f"run `python -m aorta.hw_queue_eval restore{option}`"


def _restore_device(driver: GpuDriver, record: JsonObject, state_dir: str | Path | None) -> JsonObject:
    """Undo what `record` says was (or was about to be) changed; verify; return what was read
    (`state_dir`: the folder of its state file, for the advice when that fails).

    An undo that fails is DeviceLeftChanged unless the change itself had failed ("pending": the
    vendor tool refused it) and the read-back shows the prior state.
    """
    prior, applied = record["prior"], record.get("applied", {})
    errors: list[str] = []
    soft: list[str] = []
    undo: list[tuple[str, Callable[[], None]]] = []
    if "power_limit_w" in applied and prior.get("power_limit_w") is not None:
        undo.append(("power_limit_w", lambda: driver.set_power_limit(prior["power_limit_w"])))
    if "clock_level" in applied:
        undo.append(("clock_level", lambda: driver.restore_clock(prior)))
    for name, action in undo:
        try:
            action()
        except GpuControlError as exc:
            (soft if applied[name].get("pending") else errors).append(str(exc))
    try:
        after = driver.snapshot()
    except GpuControlError as exc:
        raise DeviceLeftChanged(
            f"could not read GPU {record['index']} back after restoring it: "
            f"{exc}; {restore_advice(state_dir)}"
        ) from None
    if "power_limit_w" in applied and prior.get("power_limit_w") is not None:
        now = after.get("power_limit_w")
        if now is None or abs(now - prior["power_limit_w"]) > POWER_TOLERANCE_W:
            errors.append(f"power cap reads {now} W after restore, expected {prior['power_limit_w']} W")
    if (
        "clock_level" in applied
        and "perf_level" in prior["clock"]
        and after["clock"].get("perf_level") != prior["clock"]["perf_level"]
    ):
        errors.append(
            f"performance level reads {after['clock'].get('perf_level')!r} after "
            f"restore, expected {prior['clock']['perf_level']!r}"
        )
    if errors:
        raise DeviceLeftChanged(
            f"could not put GPU {record['index']} back as found: "
            f"{'; '.join(errors + soft)}; {restore_advice(state_dir)}"
        )
    return after


def restore_from_file(path: Path, state_dir: str | Path | None) -> str:
    """Put back the device recorded in a state file left by a dead process; remove the file
    (`state_dir`: the --state-dir it was found in, None: the default)."""
    record = gpu_state.read_state(path)  # every field validated; a bad file stays in place
    driver = _driver_for_record(record)
    try:
        _check_power_in_range(driver, record, path)
        _restore_device(driver, record, state_dir)
    finally:
        _close(driver)
    gpu_state.remove_state(path)
    return (
        f"restored {record['vendor']} GPU {record['index']} to its prior state "
        f"(left changed by pid {record.get('pid')} at {record.get('started')})"
    )


def _check_power_in_range(driver: GpuDriver, record: JsonObject, path: Path) -> None:
    """Refuse a recorded prior power cap outside what the device reports it accepts now."""
    watts = record["prior"].get("power_limit_w")
    if watts is None or "power_limit_w" not in record.get("applied", {}):
        return
    snap = driver.snapshot()
    low, high = snap.get("power_min_w"), snap.get("power_max_w")
    if (low is not None and watts < low - POWER_TOLERANCE_W) or (
        high is not None and watts > high + POWER_TOLERANCE_W
    ):
        raise UsageError(
            f"state file {path}: prior power cap {watts:g} W is outside what GPU "
            f"{record['index']} accepts ({low:g}..{high:g} W); it was left in place"
        )


def recover_stale_states(echo: Any = None, *, state_dir: str | Path | None) -> list[str]:
    """Restore every device left changed by a process that no longer runs (the next start), from
    the state files in `state_dir` (the --state-dir option; None: the default folder).

    Never stops the caller: what cannot be restored is reported as a warning (a command that
    controls that same device then refuses to start, in GpuControl.preflight).
    """
    messages = []
    try:
        paths = gpu_state.list_state_files(state_dir)
    except UsageError as exc:
        paths = []
        messages.append(f"warning: GPU state files not checked: {exc}")
    for path in paths:
        try:
            record = gpu_state.read_state(path)
            if gpu_state.owner_alive(record):
                continue
            messages.append(f"note: {restore_from_file(path, state_dir)}")
        except AortaError as exc:
            messages.append(f"warning: {path}: {exc}")
    if echo is not None:
        for message in messages:
            echo(message)
    return messages


class GpuControl:
    """Context manager: snapshot → state file → apply → verify; restore on every exit path.

    `state_dir`: where the state file is kept (the --state-dir option; None: the default)."""

    def __init__(
        self,
        target: GpuTarget,
        request: GpuRequest,
        open_driver: Callable[[GpuTarget], GpuDriver] | None = None,
        *,
        state_dir: str | Path | None,
    ) -> None:
        self.target = target
        self.request = request
        self.state_dir = state_dir
        self.open_driver = open_driver or DeviceGpus().driver_for
        self.driver: GpuDriver | None = None
        self.record: JsonObject | None = None
        self.path: Path | None = None
        self.report: JsonObject = {  # the result's gpu_control section, updated in place
            "requested": request.to_dict(),
            "device": target.describe(),
            "status": "not_started",
        }

    def preflight(self) -> JsonObject:
        """Tool present, device readable, requested power within its limits (changes nothing)."""
        path = gpu_state.state_path(self.target.vendor, self.target.index, self.state_dir)
        if path.exists():
            record = gpu_state.read_state(path)
            if gpu_state.owner_alive(record) and record.get("pid") != os.getpid():
                raise UsageError(
                    f"{self.target.describe()} is being controlled by running pid "
                    f"{record.get('pid')} (state file {path}); wait for it to end"
                )
            restore_from_file(path, self.state_dir)
        gpu_state.ensure_state_dir(self.state_dir)
        self.driver = self.driver or self.open_driver(self.target)
        snap = self.driver.snapshot()
        watts = self.request.power_limit_w
        low, high = snap.get("power_min_w"), snap.get("power_max_w")
        if watts is not None and (
            (low is not None and watts < low - POWER_TOLERANCE_W)
            or (high is not None and watts > high + POWER_TOLERANCE_W)
        ):
            raise UsageError(
                f"power limit {watts:g} W is outside what "
                f"{self.target.describe()} accepts ({low:g}..{high:g} W)"
            )
        return snap

    def __enter__(self) -> JsonObject:
        try:
            prior = self.preflight()
        except BaseException:
            self.close()
            raise
        assert self.driver is not None
        self.record = {
            "vendor": self.target.vendor,
            "index": self.target.index,
            "tool": self.driver.tool,
            "simulated": self.target.simulated,
            "pid": os.getpid(),
            "pid_start_ticks": gpu_state.process_start_ticks(os.getpid()),
            "started": utc_timestamp(),
            "argv": list(sys.argv),
            "prior": prior,
            "applied": {},
        }
        self.report["tool"] = self.driver.tool  # which backend acts: amdsmi, rocm-smi, …
        self.path = gpu_state.write_state(self.record, self.state_dir)  # before anything changes
        try:
            self._apply(prior)
        except BaseException as exc:
            self._restore(stopping=exc)
            raise
        return self.report

    def _note(self, key: str, value: Any) -> None:
        assert self.record is not None
        self.record["applied"][key] = value
        gpu_state.write_state(self.record, self.state_dir)

    def _apply(self, prior: JsonObject) -> None:
        assert self.driver is not None
        target_clock = None
        if self.request.clock_level is not None:
            self._note("clock_level", {"level": self.request.clock_level, "pending": True})
            target_clock = self.driver.set_clock_level(self.request.clock_level, prior)
            self._note("clock_level", {**target_clock, "pending": False})
        if self.request.power_limit_w is not None:
            watts = self.request.power_limit_w
            self._note("power_limit_w", {"watts": watts, "pending": True})
            self.driver.set_power_limit(watts)
            self._note("power_limit_w", {"watts": watts, "pending": False})
        after = self.driver.snapshot()
        in_effect = self.driver.in_effect(after)
        problems = []
        if target_clock is not None:
            mhz = in_effect.get("clock_mhz")
            if mhz is None or abs(mhz - target_clock["mhz"]) > max(15, 0.01 * target_clock["mhz"]):
                problems.append(
                    f"clock reads {in_effect.get('clock_mhz')} MHz, expected "
                    f"{target_clock['mhz']} MHz (level {target_clock['level']})"
                )
            in_effect["clock_level"] = target_clock["level"] if not problems else None
            in_effect["clock_target"] = target_clock
        if self.request.power_limit_w is not None:
            now = in_effect.get("power_limit_w")
            if now is None or abs(now - self.request.power_limit_w) > POWER_TOLERANCE_W:
                problems.append(f"power cap reads {now} W, expected {self.request.power_limit_w:g} W")
        self.report.update(
            {
                "status": "applied",
                "tool": self.driver.tool,
                "prior": prior,
                "in_effect": in_effect,
                "verified": not problems,
            }
        )
        if problems:
            raise GpuControlError(
                f"{self.target.describe()}: setting did not take effect: {'; '.join(problems)}"
            )

    def close(self) -> None:
        """Release the driver (amdsmi_shut_down for the library); a later use opens it again."""
        _close(self.driver)

    def _restore(self, stopping: BaseException | None = None) -> None:
        """Put the device back; DeviceLeftChanged if that fails, even while `stopping` (the
        exception that ends the command) is in flight: a device left changed outranks it."""
        if self.record is None or self.driver is None or self.path is None:
            self.close()
            return
        with _signals_held():
            try:
                after = _restore_device(self.driver, self.record, self.state_dir)
            except DeviceLeftChanged as exc:
                self.close()
                self.report.update({"status": "restore_failed", "restore_error": str(exc)})
                if stopping is None:
                    raise
                why = (
                    f"exit {stopping.code}"
                    if isinstance(stopping, SystemExit)
                    else str(stopping).strip() or type(stopping).__name__
                )
                raise DeviceLeftChanged(f"{exc} (while stopping after: {why})") from stopping
            gpu_state.remove_state(self.path)
            self.report.update({"status": "restored", "after_restore": self.driver.in_effect(after)})
            self.record = None
            self.close()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._restore(stopping=exc)
