"""Example outputs of the standalone bpftrace scripts, `<script>_example.txt` beside each one
(as bpftrace's own tools/ keep them), and the check that they are still current.

Each example starts with the sha256 of the script it shows, so a script changed without its
example is caught (tests/test_bt_examples.py). Scripts whose tracepoints exist on this machine
are recorded for real (as root: bpftrace against a helper process that makes the events); the
amdgpu/KFD tracepoint scripts need an AMD GPU, so their examples show the output's shape with
`N` for every value and say that nothing there was measured.

    sudo .venv/bin/python scripts/bt_examples.py          # record / rewrite every example
    .venv/bin/python scripts/bt_examples.py --check       # exit 1 when an example is stale
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "ebpfaultline" / "bpftrace"
HASH_RE = re.compile(r"^Example of (?P<name>\S+\.bt) \(script sha256 (?P<digest>[0-9a-f]{12})\)", re.M)
MAP_RE = re.compile(r"@\w+")
CLEARED_RE = re.compile(r"(?:clear|delete)\((@\w+)\)")
MAX_LINES_PER_MAP = 12

# what each recordable script is run against: a helper process making its events (its pid is $1)
HELPERS = {
    "cpu_oncpu_threads.bt": (
        "helper: 3 threads alternately spinning ~1 ms and sleeping 1 ms",
        "import threading,time\n"
        "def w():\n"
        "  end=time.monotonic()+30\n"
        "  while time.monotonic()<end:\n"
        "    t=time.monotonic()\n"
        "    while time.monotonic()-t<0.001: pass\n"
        "    time.sleep(0.001)\n"
        "for _ in range(3): threading.Thread(target=w,daemon=True).start()\n"
        "time.sleep(30)\n",
    ),
    "cpu_runqlat_threads.bt": (
        "helper: 3 threads sleeping 1 ms in a loop, beside 2 CPU hogs",
        "import os,threading,time\n"
        "hogs=[os.fork() for _ in range(2)]\n"
        "if 0 in hogs:\n"
        "  end=time.monotonic()+30\n"
        "  while time.monotonic()<end: pass\n"
        "  os._exit(0)\n"
        "def w():\n"
        "  for _ in range(30000): time.sleep(0.001)\n"
        "for _ in range(3): threading.Thread(target=w,daemon=True).start()\n"
        "time.sleep(30)\n",
    ),
    "kfd_queue_ioctls.bt": (
        "helper: ioctls numbered as KFD's (type 'K', 0x02 CREATE_QUEUE, 0x0C WAIT_EVENTS) on a "
        "pipe, with no GPU: each fails with ENOTTY, the probes see it all the same",
        "import fcntl,os,time\n"
        "r,w=os.pipe()\n"
        "end=time.monotonic()+30\n"
        "while time.monotonic()<end:\n"
        "  for nr in (0x02,0x0C,0x0C):\n"
        "    try: fcntl.ioctl(r,(0x4B<<8)|nr)\n"
        "    except OSError: pass\n"
        "  time.sleep(0.0005)\n",
    ),
}


def digest(script: Path) -> str:
    """The first 12 hex digits of the script's sha256: what its example was made from."""
    return hashlib.sha256(script.read_bytes()).hexdigest()[:12]


def printed_maps(script: Path) -> list[str]:
    """The maps bpftrace prints at exit: every map the script names, less those its END clears."""
    text = re.sub(r"/\*.*?\*/", "", script.read_text(), flags=re.S)
    end = text.split("\nEND", 1)[1] if "\nEND" in text else ""
    cleared = set(CLEARED_RE.findall(end))
    return sorted({m for m in MAP_RE.findall(text)} - cleared)


def example_path(script: Path) -> Path:
    return script.with_name(f"{script.stem}_example.txt")


def problems(folder: Path = SCRIPTS) -> list[str]:
    """What is missing or stale, one line each (empty when every example is current)."""
    found = []
    for script in sorted(folder.glob("*.bt")):
        path = example_path(script)
        if not path.is_file():
            found.append(f"{path.name}: missing (run scripts/bt_examples.py as root)")
            continue
        text = path.read_text()
        head = HASH_RE.search(text)
        if head is None or head["name"] != script.name:
            found.append(f"{path.name}: no 'Example of {script.name} (script sha256 …)' line")
        elif head["digest"] != digest(script):
            found.append(f"{path.name}: made from an older {script.name}: record it again")
        for name in printed_maps(script):
            if f"{name}[" not in text and f"{name}:" not in text:
                found.append(f"{path.name}: shows nothing of {name}, which {script.name} prints")
    return found


def _shape(script: Path) -> str:
    """The output's shape for a script that cannot run here: each printed map, N for values."""
    lines, text = [], script.read_text()
    for name in printed_maps(script):
        if re.search(rf"{name}\[[^\]]*\]\s*=\s*hist\(", text):
            lines += [
                f"{name}[KEY]:",
                "[N, N)    N |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|",
                "",
            ]
        else:
            lines += [f"{name}[KEY]: N", ""]
    return "\n".join(lines)


def _trim(output: str, pid: int) -> str:
    """bpftrace's text output with at most MAX_LINES_PER_MAP lines per map and the pid named."""
    out, count = [], 0
    for line in output.splitlines():
        if line.startswith("Attaching"):
            continue
        if line.startswith("@") and ":" in line and "[" in line and not line.rstrip().endswith(":"):
            count += 1
            if count > MAX_LINES_PER_MAP:
                if count == MAX_LINES_PER_MAP + 1:
                    out.append("… (more entries cut)")
                continue
        else:
            count = 0 if not line.strip() else count
        out.append(line)
    return "\n".join(out).replace(str(pid), "PID").strip() + "\n"


def record(script: Path, bpftrace: str) -> str:
    """Run `script` for 2 s against its helper; the example text."""
    what, code = HELPERS[script.name]
    helper = subprocess.Popen([sys.executable, "-I", "-c", code], start_new_session=True)
    try:
        proc = subprocess.Popen(
            [bpftrace, str(script), str(helper.pid)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()  # "Attaching N probes..."
        time.sleep(2.0)
        out = ""
        for _ in range(15):  # a SIGINT during attach is lost: send again
            proc.send_signal(signal.SIGINT)
            try:
                out, err = proc.communicate(timeout=2)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            proc.kill()
            raise SystemExit(f"{script.name}: bpftrace did not stop")
        if proc.returncode != 0:
            raise SystemExit(f"{script.name}: bpftrace failed: {err.strip()}")
    finally:
        os.killpg(helper.pid, signal.SIGKILL)
        helper.wait()
    version = subprocess.run([bpftrace, "--version"], capture_output=True, text=True).stdout.strip()
    header = (
        f"Example of {script.name} (script sha256 {digest(script)}), recorded "
        f"{datetime.date.today()} on Linux {platform.release()}, {version}\n"
        f"({what}; each map cut to {MAX_LINES_PER_MAP} entries):\n\n"
        f"# sudo bpftrace {script.name} PID\n"
    )
    return header + _trim(first + out, helper.pid)


def shaped(script: Path) -> str:
    return (
        f"Example of {script.name} (script sha256 {digest(script)}): the shape of its output only.\n"
        "Not recorded: its tracepoints exist only where the amdgpu/amdkfd driver is loaded, and the\n"
        "machine that wrote this has no AMD GPU. KEY is the map's key (see the script's header),\n"
        "N a value; nothing here was measured.\n\n"
        f"# sudo bpftrace {script.name}{' PID' if '$1' in script.read_text() else ''}\n"
        "Attaching N probes...\n^C\n" + _shape(script)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when an example is stale")
    args = parser.parse_args()
    if args.check:
        found = problems()
        for line in found:
            print(line, file=sys.stderr)
        return 1 if found else 0
    if os.geteuid() != 0:
        print("bt_examples: recording runs bpftrace: run it as root (sudo)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO / "src"))
    from aorta.ebpf.session import bpftrace_path

    bpftrace = bpftrace_path() or "bpftrace"
    for script in sorted(SCRIPTS.glob("*.bt")):
        text = record(script, bpftrace) if script.name in HELPERS else shaped(script)
        example_path(script).write_text(text)
        print(f"wrote {example_path(script).relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
