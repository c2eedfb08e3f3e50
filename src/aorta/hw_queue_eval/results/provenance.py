"""Provenance of a result: which aorta (version, git commit), which GPU driver, which clocks.

Everything is read from files, never by running a program: the commit from the package's own
source checkout's `.git` (no `git` subprocess, nothing looked up from the current folder), the
driver version from the kernel module's sysfs/procfs file, AMD clocks from the device's sysfs
`pp_dpm_*` files, NVIDIA clocks through NVML when pynvml is importable. What cannot be read is
null with the reason. No torch import here (the GPU facts come from the backend's environment).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import aorta
from aorta.common.jsontypes import JsonObject

MAX_READ = 64 * 1024
_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_REF = re.compile(r"refs/[A-Za-z0-9._/-]+")
_DPM_LINE = re.compile(r"^\s*(\d+):\s*(\d+)\s*[Mm][Hh]z\s*(\*)?\s*$")
CLOCKS_WHEN = "read right after the measurement window"


def _read(path: Path) -> str | None:
    """A small text file's content, or None when it is missing or unreadable (never raises)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_READ).decode("utf-8", "replace")
    except OSError:
        return None


# -- aorta's own commit ----------------------------------------------------------------------------


def source_checkout(package_dir: Path | None = None) -> Path | None:
    """The checkout aorta runs from (`<root>/src/aorta` is this package), or None when installed."""
    package = (package_dir or Path(aorta.__file__).parent).resolve()
    root = package.parent.parent
    if package.parent.name != "src" or not (root / "pyproject.toml").is_file():
        return None
    return root if (root / ".git").exists() else None


def _git_dir(root: Path) -> Path | None:
    """`<root>/.git`, or the folder a worktree's `.git` file points to (`gitdir: …`)."""
    dot_git = root / ".git"
    if dot_git.is_dir():
        return dot_git
    text = _read(dot_git)
    if text is None or not text.startswith("gitdir:"):
        return None
    target = Path(text.split(":", 1)[1].strip())
    return target if target.is_absolute() else (root / target)


def _common_dir(git_dir: Path) -> Path:
    """Where refs live: a worktree's `commondir`, else the git folder itself."""
    text = _read(git_dir / "commondir")
    if text is None or not text.strip():
        return git_dir
    common = Path(text.strip())
    return common if common.is_absolute() else git_dir / common


def _resolve_ref(git_dir: Path, ref: str) -> str | None:
    """The commit a ref names: a loose ref file, else packed-refs (worktree's, then common)."""
    for base in (git_dir, _common_dir(git_dir)):
        loose = _read(base / ref)
        if loose is not None and _SHA.fullmatch(loose.strip()):
            return loose.strip()
    packed = _read(_common_dir(git_dir) / "packed-refs") or ""
    for line in packed.splitlines():
        sha, _, name = line.partition(" ")
        if name.strip() == ref and _SHA.fullmatch(sha):
            return sha
    return None


def git_commit(package_dir: Path | None = None) -> tuple[str | None, str | None]:
    """(commit of the checkout aorta runs from, None) or (None, why not).

    Only a full hex object id is ever returned, so a foreign file can at worst name a wrong
    commit, never put other text into the result.
    """
    root = source_checkout(package_dir)
    if root is None:
        return None, "aorta is not running from a git checkout (an installed package)"
    git_dir = _git_dir(root)
    head = _read(git_dir / "HEAD") if git_dir is not None else None
    if git_dir is None or head is None:
        return None, f"cannot read the git HEAD of {root}"
    head = head.strip()
    if _SHA.fullmatch(head):  # detached HEAD
        return head, None
    ref = head[len("ref:") :].strip() if head.startswith("ref:") else ""
    if not _REF.fullmatch(ref) or ".." in ref:
        return None, f"the git HEAD of {root} is not a commit or a branch"
    sha = _resolve_ref(git_dir, ref)
    if sha is None:
        return None, f"{ref} of {root} has no commit yet"
    return sha, None


@functools.cache
def tool_info() -> JsonObject:
    """The result's `tool` section: name, version, git commit (null with the reason)."""
    sha, reason = git_commit()
    return {"name": "aorta", "version": aorta.__version__, "git_commit": sha, "git_commit_reason": reason}


# -- GPU driver and clocks -------------------------------------------------------------------------


def gpu_vendor(environment: JsonObject) -> str | None:
    """nvidia / amd from the torch build the run used, None on the CPU backend."""
    if environment.get("backend") != "gpu":
        return None
    return "amd" if environment.get("rocm_version") else "nvidia"


def gpu_driver(environment: JsonObject, root: Path = Path("/")) -> JsonObject:
    """The kernel driver of the GPU: name, version and the file it came from (null + reason)."""
    vendor = gpu_vendor(environment)
    if vendor is None:
        return {"name": None, "version": None, "source": None, "reason": "CPU backend: no GPU driver in use"}
    if vendor == "nvidia":
        source = root / "sys/module/nvidia/version"
        version = (_read(source) or "").strip()
        if not version:
            source = root / "proc/driver/nvidia/version"
            match = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]*)", _read(source) or "")
            version = match.group(1) if match else ""
        if version:
            return {"name": "nvidia", "version": version, "source": str(source), "reason": None}
        return {
            "name": "nvidia",
            "version": None,
            "source": None,
            "reason": "neither /sys/module/nvidia/version nor /proc/driver/nvidia/version is readable",
        }
    source = root / "sys/module/amdgpu/version"
    version = (_read(source) or "").strip()
    if version:
        return {"name": "amdgpu", "version": version, "source": str(source), "reason": None}
    if (root / "sys/module/amdgpu").is_dir():
        return {
            "name": "amdgpu",
            "version": None,
            "source": None,
            "reason": "the kernel's own (in-tree) amdgpu has no module version: it is the "
            "kernel's (environment.kernel)",
        }
    return {
        "name": "amdgpu",
        "version": None,
        "source": None,
        "reason": "the amdgpu module is not loaded here (a container without /sys/module?)",
    }


def pci_address(environment: JsonObject) -> str | None:
    """The GPU's PCI address (domain:bus:device.0) from the backend's device properties."""
    bus, dev, domain = (environment.get(k) for k in ("pci_bus_id", "pci_device_id", "pci_domain_id"))
    if not all(isinstance(v, int) and v >= 0 for v in (bus, dev, domain)):
        return None
    return f"{domain:04x}:{bus:02x}:{dev:02x}.0"


def _current_dpm_mhz(text: str | None) -> int | None:
    """The level marked `*` in a pp_dpm_* file ("1: 1200Mhz *"), in MHz."""
    for line in (text or "").splitlines():
        match = _DPM_LINE.match(line)
        if match and match.group(3):
            return int(match.group(2))
    return None


def _unread_clocks(reason: str) -> JsonObject:
    return {
        "graphics_mhz": None,
        "memory_mhz": None,
        "performance_level": None,
        "source": None,
        "when": CLOCKS_WHEN,
        "reason": reason,
    }


def amd_clocks(address: str, root: Path = Path("/")) -> JsonObject:
    """sclk/mclk in effect (the `*` level of pp_dpm_sclk/mclk) and the performance level."""
    device = root / "sys/bus/pci/devices" / address
    graphics = _current_dpm_mhz(_read(device / "pp_dpm_sclk"))
    if graphics is None:
        return _unread_clocks(f"{device}/pp_dpm_sclk is not readable or marks no current level")
    level = (_read(device / "power_dpm_force_performance_level") or "").strip() or None
    return {
        "graphics_mhz": graphics,
        "memory_mhz": _current_dpm_mhz(_read(device / "pp_dpm_mclk")),
        "performance_level": level,
        "source": f"{device}/pp_dpm_sclk, pp_dpm_mclk",
        "when": CLOCKS_WHEN,
        "reason": None,
    }


def nvidia_clocks(address: str) -> JsonObject:
    """SM and memory clocks in effect through NVML (pynvml), when it is importable."""
    try:
        import pynvml
    except ImportError:
        return _unread_clocks(
            "reading NVIDIA clocks needs the pynvml package (aorta does not run nvidia-smi for this)"
        )
    try:
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(address.encode())
            graphics = int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
            memory = int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM))
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # NVMLError and its many subclasses; never stop a finished run
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return _unread_clocks(f"NVML could not read the clocks: {why}")
    return {
        "graphics_mhz": graphics,
        "memory_mhz": memory,
        "performance_level": None,
        "source": "NVML (pynvml) clock info: SM, MEM",
        "when": CLOCKS_WHEN,
        "reason": None,
    }


def gpu_clocks(environment: JsonObject, root: Path = Path("/")) -> JsonObject:
    """The GPU clocks in effect for this run (locked by --lock-clocks or not); null + reason."""
    vendor = gpu_vendor(environment)
    if vendor is None:
        return _unread_clocks("CPU backend: no GPU clocks")
    address = pci_address(environment)
    if address is None:
        return _unread_clocks("torch did not report the GPU's PCI address")
    return amd_clocks(address, root) if vendor == "amd" else nvidia_clocks(address)


def gpu_facts(environment: JsonObject) -> JsonObject:
    """The environment keys this module adds: gpu_driver and gpu_clocks."""
    return {"gpu_driver": gpu_driver(environment), "gpu_clocks": gpu_clocks(environment)}
