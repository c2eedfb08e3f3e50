"""Stand-in GPU runtime libraries (tests only): same exported names and signatures, known behaviour.

`build(dest)` compiles them with gcc into `dest` under the real runtime file names; `Runtime`
drives them through ctypes the way HIP/CUDA are driven (streams, launches, doorbells, syncs).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
# output name → (source, extra gcc arguments)
LIBS = {
    "libhsa-runtime64.so.1": ("hsa.c", []),
    "libamdhip64.so": ("hip.c", ["-L{dest}", "-l:libhsa-runtime64.so.1", "-Wl,-rpath,$ORIGIN"]),
    "libcudart.so.12": ("cudart.c", []),
    "libcuda.so.1": ("cuda.c", []),
}


class Dim3(ctypes.Structure):
    """dim3 / hsa_dim3_t: three uint32, passed by value like the runtime's own."""

    _fields_ = [("x", ctypes.c_uint32), ("y", ctypes.c_uint32), ("z", ctypes.c_uint32)]


#: argument types of hip/cudaLaunchKernel(func, gridDim, blockDim, args, sharedMem, stream)
LAUNCH_ARGTYPES = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


class LaunchConfig(ctypes.Structure):
    """cudaLaunchConfig_t (driver_types.h) / hipLaunchConfig_t: gridDim, blockDim, dynamicSmemBytes,
    stream, attrs, numAttrs."""

    _fields_ = [
        ("gridDim", Dim3),
        ("blockDim", Dim3),
        ("dynamicSmemBytes", ctypes.c_size_t),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p),
        ("numAttrs", ctypes.c_uint),
    ]


def gcc() -> str | None:
    """The C compiler the stand-ins need, or None."""
    return shutil.which("gcc")


def build(dest: Path) -> dict[str, Path]:
    """Compile every stand-in into `dest`; returns file name → path."""
    out = {}
    for name, (source, extra) in LIBS.items():
        target = dest / name
        args = [a.replace("{dest}", str(dest)) for a in extra]
        subprocess.run(
            [
                gcc() or "gcc",
                "-shared",
                "-fPIC",
                "-O1",
                "-Wall",
                "-o",
                str(target),
                str(HERE / source),
                *args,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        out[name] = target
    return out


def counter(lib: ctypes.CDLL, name: str) -> int:
    """A uint64 counter the stand-in keeps itself (ground truth)."""
    return int(ctypes.c_uint64.in_dll(lib, name).value)


def reset(lib: ctypes.CDLL, *names: str) -> None:
    """Zero the stand-in's own counters (start of a measured window)."""
    for name in names:
        ctypes.c_uint64.in_dll(lib, name).value = 0
