"""`python -m aorta.hw_queue_eval` and the `aorta-hwq` script: signals handled from the first import.

The command line's imports (click, every command module) take a few hundred milliseconds; a
Ctrl+C or SIGTERM landing in them used to print a KeyboardInterrupt traceback or end the process
by the signal (−15). Here SIGTERM is caught before them, and both end as documented: 130 or 143,
nothing written, no traceback. Only the interpreter's own start-up, before this module runs, is
left to the kernel's default.
"""

from __future__ import annotations

import sys

from aorta.common import environment
from aorta.common.errors import ExitCode, Terminated
from aorta.common.interrupts import INTERRUPTED_LINE, catch_terminate, commit


def entry() -> None:
    """Catch SIGTERM, make a torchrun rank die with its agent, import the CLI, run it."""
    catch_terminate()
    if environment.get("TORCHELASTIC_RUN_ID") is not None:  # torchrun's mark on its ranks
        from aorta.common.procs import die_with_launcher

        die_with_launcher(environment.snapshot())
    try:
        from aorta.hw_queue_eval.cli import main
    except KeyboardInterrupt:
        commit()
        sys.stderr.write(f"\n{INTERRUPTED_LINE}\n")
        sys.exit(ExitCode.INTERRUPTED)
    except Terminated:
        commit()
        sys.exit(ExitCode.TERMINATED)
    main()


if __name__ == "__main__":
    entry()
