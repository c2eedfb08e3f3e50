"""The real GPU vendor libraries the gpu_runtime tests probe, from pinned PyPI wheels (tests only).

AMD's ROCm 5 libamdhip64 (with libhsa-runtime64), NVIDIA's CUDA 12 and CUDA 13 runtimes
(libcudart.so.12, libcudart.so.13: torch 2.11's cu130 build loads the latter) and libnccl.so.2.

No GPU is needed: every call made on them fails early (no driver / no device / invalid handle),
and a uprobe at a function's entry fires before that. Wheels are pinned by version and SHA-256,
downloaded with `pip download --no-deps` into ~/.cache/aorta-test-wheels (outside the checkout),
and only the shared libraries the tests load are extracted, each checked against its own
SHA-256, into ~/.cache/aorta-test-libs/<wheel>/. `python tests/vendor_libs.py` (run by
`scripts/setup.sh --test`) fetches and extracts them; tests call `library()`, which only looks.
Standard library only: setup runs it before the project's dependencies are installed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

CACHE = Path.home() / ".cache"
WHEELS, LIBS = CACHE / "aorta-test-wheels", CACHE / "aorta-test-libs"


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel: requirement, file name, hash, the members to extract (name → sha256)."""

    requirement: str
    filename: str
    sha256: str
    prefix: str  # folder of the members inside the wheel
    members: dict[str, str]
    pip_args: tuple[str, ...] = ()  # the wheel's tags when they differ from this interpreter's


WHEELS_PINNED = {
    "rocm": Wheel(
        "pytorch-triton-rocm==2.1.0",
        "pytorch_triton_rocm-2.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "ec63623c16eebe356d40460a09374a2546591dd2b0cb2122622111fc4d0f7f25",
        "triton/third_party/rocm/lib/",
        {  # libamdhip64 (ROCm 5.x, versioned exports) and what it needs at load time
            "libamdhip64.so": "dfece7419882323f6380c6e07834442b0e1df047f6edb11e868a039ff8faf85b",
            "libhsa-runtime64.so": "69670170dc3bfbe5b2d159688f8e8caced52c4341b0fb3215106abb10fa1596d",
            "libamd_comgr.so": "a941eeed9dd97be3b1d6551a3e41baaba0d201dcc3b308a0b283c0972f715baf",
            "libnuma.so": "5b11ace2a018b35f290bd9a0cef8db6521fd2515cc019c8806fbdbdca37aad7b",
            "libdrm.so": "babbf4c24c2527f4a6141769d645a5fa9f7a3da1e7df1bb372a04a26d735add7",
            "libdrm_amdgpu.so": "5a8eddcd42c3a5a359b68e58349d5d8f96acfd294d44be2eeca740fa50cce67a",
            "libelf.so": "2eb1428c232e5d08203c1486ac742a01f6155b8e4d01c5398c8caa7670ef6e9c",
            "libtinfo.so": "1ccaa15426202781a4d6b5bf38ebc5aff9b3e5504c9469fb115b0322565c9c11",
        },
        ("--python-version", "3.11", "--platform", "manylinux2014_x86_64", "--only-binary=:all:"),
    ),
    "cudart": Wheel(
        "nvidia-cuda-runtime-cu12==12.9.79",
        "nvidia_cuda_runtime_cu12-12.9.79-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3",
        "nvidia/cuda_runtime/lib/",
        {"libcudart.so.12": "256e6409e4f06f618e1fb53d4844a6b81cdded1013afa8ade40c22f99eb133b7"},
        ("--platform", "manylinux2014_x86_64", "--only-binary=:all:"),
    ),
    "cudart13": Wheel(  # the CUDA 13 runtime torch 2.11's cu130 build loads (the lent image's)
        "nvidia-cuda-runtime==13.0.96",
        "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548",
        "nvidia/cu13/lib/",
        {"libcudart.so.13": "96c42e418cec19054186b9429c321603cc190bf26a18104e19408117a2a817b0"},
        ("--platform", "manylinux2014_x86_64", "--only-binary=:all:"),
    ),
    "nccl": Wheel(  # 350 MB download, 470 MB extracted
        "nvidia-nccl-cu12==2.32.3",
        "nvidia_nccl_cu12-2.32.3-py3-none-manylinux_2_27_x86_64.whl",
        "bb94b2348e4861d5e8aa00b36c3d12d9bdf9c6369b82cbb723de0b582280a21c",
        "nvidia/nccl/lib/",
        {"libnccl.so.2": "a23d2e3e47ad7f8987ac73eb04a373d6d40cfbb3a7a5bf41a9e0e8434817559b"},
        ("--platform", "manylinux_2_27_x86_64", "--only-binary=:all:"),
    ),
}
# the library a test drives, per wheel
MAIN = {
    "rocm": "libamdhip64.so",
    "cudart": "libcudart.so.12",
    "cudart13": "libcudart.so.13",
    "nccl": "libnccl.so.2",
}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _dest(key: str) -> Path:
    return LIBS / WHEELS_PINNED[key].filename.removesuffix(".whl")


def library(key: str) -> Path | None:
    """The extracted main library of a pinned wheel, None when it was not fetched (sizes checked;
    hashes are checked once, at extraction, which writes the stamp last)."""
    dest = _dest(key)
    if not (dest / ".complete").is_file():
        return None
    wheel = WHEELS_PINNED[key]
    if any(not (dest / name).is_file() or (dest / name).is_symlink() for name in wheel.members):
        return None
    return dest / MAIN[key]


def fetch(key: str) -> Path:
    """Download (if absent) and check the pinned wheel, extract its members; the main library."""
    wheel = WHEELS_PINNED[key]
    found = library(key)
    if found is not None:
        return found
    WHEELS.mkdir(parents=True, exist_ok=True)
    path = WHEELS / wheel.filename
    if not path.is_file() or _sha256(path) != wheel.sha256:
        path.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *wheel.pip_args, "-d", str(WHEELS)]
        subprocess.run([*cmd, wheel.requirement], check=True, stdout=subprocess.DEVNULL)
        if _sha256(path) != wheel.sha256:
            path.unlink(missing_ok=True)
            raise SystemExit(f"vendor_libs: {wheel.filename} does not have the pinned SHA-256")
    dest = _dest(key)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / ".complete").unlink(missing_ok=True)
    with zipfile.ZipFile(path) as z:
        for name, digest in wheel.members.items():
            member = wheel.prefix + name
            with tempfile.NamedTemporaryFile(dir=dest, delete=False) as tmp, z.open(member) as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    tmp.write(block)
            if _sha256(Path(tmp.name)) != digest:
                os.unlink(tmp.name)
                raise SystemExit(f"vendor_libs: {name} in {wheel.filename} does not have the pinned SHA-256")
            os.chmod(tmp.name, 0o644)
            os.replace(tmp.name, dest / name)  # replaces a planted symlink instead of writing through
    (dest / ".complete").write_text("ok\n")
    return dest / MAIN[key]


if __name__ == "__main__":
    for k in sys.argv[1:] or list(WHEELS_PINNED):
        print(f"vendor_libs: {k}: {fetch(k)}", file=sys.stderr)
