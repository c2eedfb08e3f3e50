"""Check that a result file from `run --ebpf-trace` was traced: status ok, events seen, none lost.

Used by the container checks (scripts/check-readme-debian.sh, docker/check-image.sh); standard
library only, so it runs with any python3. Prints one summary line; exit 1 when not traced.
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> int:
    """Print the traced result's key counts and return 0 only for an ok trace with 0 lost events."""
    with open(path, encoding="utf-8") as fh:
        result = json.load(fh)
    queue = result.get("ebpf_queue_metrics") or {}
    status = queue.get("status")
    lost = queue.get("lost_events")
    events = queue.get("total_submissions")
    print(
        f"traced result {path}: workload={result.get('workload_name')} streams={result.get('stream_count')} "
        f"ebpf status={status} source={queue.get('source')} submissions={events} "
        f"dispatches={queue.get('total_dispatches')} probes_attached={queue.get('probes_attached')} "
        f"lost_events={lost}"
    )
    ok = status == "ok" and lost == 0 and isinstance(events, int) and events > 0
    if not ok:
        print(f"NOT a traced result with 0 lost events (error: {queue.get('error')})", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python3 assert_traced_result.py RESULT.json", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
