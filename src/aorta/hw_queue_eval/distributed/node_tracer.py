"""One bpftrace per node under torchrun: local rank 0 traces every local rank of its node.

Hand-over through torchrun's store (keys under `aorta/ebpf/<restart attempt>/node<N>/`; JSON only,
never pickle):

1. prepare: every other local rank publishes its pid, queue-worker tids, doorbell fds and its
   submitting thread; local rank 0 waits for all of them, starts ONE session for all the pids
   (each rank's queues renumbered `local_rank * QUEUE_STRIDE + q` so they cannot collide; thread
   labels carry the pid) and publishes the session's marker token (or why there is none), with
   what each family kept from rendering (attached probes) so every rank collects alike. The
   program is a node program (TraceTarget.rank_keys): pid k is rank slot k, its children inherit
   the slot, and every per-process map is keyed by the rank first (probes/ranks.py).
2. window: each rank sends its own START marker (the first opens the node's gate) and reads its
   own /proc counters at its own window edges. At its stop, each rank adds 1 to a store counter;
   the rank that completes the count sends the one STOP marker and releases the others. So the
   gate spans first start → last stop, and a rank whose window ended sits in that wait doing no
   queue work: the events attributed to its pid and queues are those of its own window.
3. finish: local rank 0 stops bpftrace and publishes the printed maps; every rank builds its own
   sections from its slice of the maps (its queues, its rank key) and its own harness records
   (hand-offs, workers, stream handles). Maps no process owns (kernel-wide reclaim, kswapd,
   jobs without a traced submission) stay node-wide and say so.

Every wait has the --dist-timeout and checks each second whether another rank reported a failure,
so a dead rank stops the others with a one-line error; the session is aborted on every error path.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from aorta.common import environment
from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.ebpf import engine, marker
from aorta.ebpf.probes.base import EdgeSnapshots, ProbeFamily, TraceTarget
from aorta.ebpf.probes.cpu_sched import SUBMITTER_LABEL, queue_slice
from aorta.ebpf.probes.ranks import rank_key, rank_keyed, rank_slice
from aorta.ebpf.probes.registry import families_for
from aorta.ebpf.program import Program, ProgramError
from aorta.ebpf.session import SessionError, SessionOutput
from aorta.hw_queue_eval.distributed import torchrun as distributed
from aorta.hw_queue_eval.results.models import TracerSections
from aorta.hw_queue_eval.tracing.window_context import WindowContext
from aorta.hw_queue_eval.tracing.window_tracer import EbpfTracer, family_context, sections_for, warn_in_result

QUEUE_STRIDE = 1000  # rank slot k's queue q is k * QUEUE_STRIDE + q in the node's program
_WAIT_SLICE_S = 0.2  # how often a waiting rank looks for another rank's failure report
_OUTPUT_FIELDS = (
    "maps",
    "lost_events",
    "lost_records",
    "attached_probes",
    "stderr",
    "exit_code",
    "stop_signal",
    "attach_s",
    "stop_s",
    "probe_cost",
    "map_keys_max",
)


class NodeTracer(EbpfTracer):
    """harness.WindowTracer for one torchrun rank; only local rank 0 runs bpftrace."""

    def __init__(
        self,
        env: distributed.DistEnv,
        timeout_s: float,
        queue: bool = True,
        memory: bool = False,
        gpu_runtime: bool = False,
        bpftrace: str | None = None,
        gpu_runtime_views: tuple[str, ...] | None = None,
    ) -> None:
        self.env = env
        self.lead = env.local_rank == 0
        self.timeout_s = timeout_s
        # a torchrun restart keeps the store: its attempt number keeps the keys apart
        attempt = environment.get("TORCHELASTIC_RESTART_COUNT") or "0"
        self.prefix = f"aorta/ebpf/{attempt if attempt.isdigit() else 0}/node{env.node_rank}/"
        # only the lead checks readiness: `bpftrace --version` is a bpftrace process too
        ready = engine.check_readiness(bpftrace=bpftrace) if self.lead else _remote_readiness({})
        super().__init__(
            queue=queue,
            memory=memory,
            ready=ready,
            gpu_runtime=gpu_runtime,
            gpu_runtime_views=gpu_runtime_views,
        )
        self.families: list[ProbeFamily] = families_for(self.queue, memory, gpu_runtime, gpu_runtime_views)
        self.token: int | None = None
        self.snapshots: dict[str, EdgeSnapshots] = {}  # family name → this rank's own edges
        self._published = False

    # -- hand-over ----------------------------------------------------------------------------
    def prepare(self, backend: Any, workload: Any) -> None:
        """Publish this rank's threads (others) or start the node's session for all (lead)."""
        mine = _own_threads(backend)
        self.submitter_tid = mine["submitter_tid"]
        if not self.lead:
            _store().set(self._key(f"target/{self.env.local_rank}"), json.dumps(mine))
            lead = json.loads(self._wait("token", "local rank 0 to start the node's bpftrace"))
            self.ready = _remote_readiness(lead.get("bpftrace") or {})
            if lead.get("token"):
                self.token = int(lead["token"])
                restore_families(self.families, lead.get("families") or {})
            else:
                self.status, self.error = lead.get("status", "error"), lead.get("error")
            return
        ranks = [mine] + [
            json.loads(self._wait(f"target/{r}", f"local rank {r}'s threads"))
            for r in range(1, self.env.local_world_size)
        ]
        reply: JsonObject = {"bpftrace": self.ready.describe() if self.ready else {}}
        if self.ready.ok and self.ready.tracefs is not None:
            try:
                check_siblings(ranks)
                self.program = engine.make_program(
                    self.queue,
                    self.memory,
                    node_target(ranks),
                    self.ready.tracefs,
                    self.ready.version,
                    families=self.families,
                )
                self.session = engine.start_session(self.program, self.ready)
                self.token = self.program.token
                reply["token"] = self.token
                reply["families"] = {f.name: f.render_state() for f in self.families}
            except (ProgramError, SessionError, OSError, ValueError, KeyError, TypeError) as exc:
                self.status, self.error = "error", str(exc)
                self.session = None
        if self.token is None:
            reply.update({"status": self.status, "error": self.error})
        _store().set(self._key("token"), json.dumps(reply))

    def window_start(self) -> None:
        if self.token is None:
            return
        self._snapshot("start")
        marker.send(marker.WINDOW_START, self.token)

    def window_stop(self) -> None:
        """Count this rank's stop; the last rank closes the node's gate; all wait for it."""
        if self.token is None:
            return
        self._snapshot("stop")
        if _store().add(self._key("stopped"), 1) == self.env.local_world_size:
            marker.send(marker.WINDOW_STOP, self.token)
            _store().set(self._key("closed"), "1")
        self._wait("closed", "every local rank to end its window")
        if self.session is not None:
            self.session.closed_elsewhere()

    def _snapshot(self, edge: str) -> None:
        """This rank's own /proc counters at its own window edge (bpftrace excluded)."""
        exclude = (self.session.pid,) if self.session is not None and self.session.pid else ()
        target = TraceTarget(pids=(os.getpid(),), exclude_pids=exclude)
        for family in self.families:
            try:
                value = family.snapshot(target)
            except Exception as exc:  # a family's snapshot bug must not stop the window
                value = {"error": f"{type(exc).__name__}: {exc}"}
            if value is not None:
                self.snapshots.setdefault(family.name, {})[edge] = value

    # -- results ------------------------------------------------------------------------------
    def finish(self, context: WindowContext) -> TracerSections:
        """This rank's sections; a failed rank (UsageError) stops the run, other errors do not."""
        try:
            sections = self._finish(context)
        except UsageError:
            self.abort()
            raise
        except Exception as exc:  # a tracer bug must not lose the benchmark's numbers
            self.abort()
            reason = f"tracer failed: {type(exc).__name__}: {exc}"
            if self.lead and self.token is not None and not self._published:
                # the other local ranks wait for the output: tell them instead of letting them hang
                _store().set(self._key("output"), json.dumps({"error": reason}))
            sections = engine.unavailable_sections(reason, self.queue, self.memory, "error", self.ready)
        warn_in_result(context.warnings, sections)
        return TracerSections.of(sections)

    def _finish(self, context: WindowContext) -> JsonObject:
        if self.token is None:
            return super()._finish(context)  # the unavailable/error sections
        if self.lead:
            assert self.session is not None and self.program is not None
            bpftrace_pid = self.session.pid
            output = self.session.stop()
            self.session = None
            shared = _published(output, self.program, bpftrace_pid)
            _store().set(self._key("output"), json.dumps(shared))
            self._published = True
        else:
            shared = json.loads(self._wait("output", "local rank 0's bpftrace output"))
            if "error" in shared:
                raise RuntimeError(f"local rank 0: {shared['error']}")
            output = _output_from(shared)
        program = _program_from(shared, self.families)
        slot = self.env.local_rank
        maps = queue_slice(output.maps, slot * QUEUE_STRIDE, QUEUE_STRIDE)
        maps = rank_slice(maps, rank_keyed(program.families), rank_key(slot))
        mine = replace(output, maps=maps)
        fam_context = replace(
            family_context(context, os.getpid(), self.submitter_tid, output),
            snapshots=self.snapshots,
            doorbells_traced=shared["doorbells"],
            rank_key=rank_key(slot),
        )
        sections = sections_for(program, mine, self.ready, self.queue, self.memory, context, fam_context)
        for key in ("ebpf_queue_metrics", "ebpf_memory_metrics"):
            section = sections.get(key)
            if not isinstance(section, dict):
                continue
            if isinstance(section.get("window"), dict):
                section["window"]["scope"] = (
                    "node: from the first local rank's window start to "
                    "the last one's stop (this rank's own window is its "
                    "total_time_ms)"
                )
            section["node_tracer"] = node_info(self.env, shared)
        return sections

    # -- store ---------------------------------------------------------------------------------
    def _key(self, name: str) -> str:
        return self.prefix + name

    def _wait(self, name: str, what: str) -> str:
        """The value of a store key, waiting for it; UsageError on another rank's failure or
        after the timeout (never a hang).

        Polls with `check` (answered at once) and sleeps between looks: a `wait` with a short
        timeout would make torch's store client log a `waitForInput … timed out` warning for
        every slice that passes without the key."""
        store, key = _store(), self._key(name)
        deadline = time.monotonic() + self.timeout_s
        while True:
            began = time.monotonic()
            try:
                if store.check([key]):
                    value: bytes = store.get(key)
                    return value.decode()
                problem: Exception | None = None
            except Exception as exc:  # the store went away
                problem = exc
            failed = distributed.failed_ranks(self.env)
            if failed:
                raise UsageError(f"rank {self.env.rank} stopped: {failed[0]}") from None
            if time.monotonic() > deadline:
                raise UsageError(
                    f"rank {self.env.rank}: waited {self.timeout_s:g} s for "
                    f"{what} (eBPF hand-over): raise --dist-timeout or check "
                    f"that rank"
                ) from problem
            time.sleep(max(0.0, _WAIT_SLICE_S - (time.monotonic() - began)))  # no busy loop


def check_siblings(ranks: list[JsonObject]) -> None:
    """Trace only processes started by this rank's own torchrun agent: the store accepts writes
    from any local user, so a published pid must be a sibling of this process (ValueError)."""
    agent = os.getppid()
    for slot, rank in enumerate(ranks):
        pid = int(rank["pid"])
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            parent = int(stat.rpartition(")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            parent = None
        if parent != agent:
            raise ValueError(
                f"local rank {slot} handed over pid {pid}, which torchrun's agent "
                f"(pid {agent}) did not start: not traced"
            )


def node_info(env: distributed.DistEnv, shared: JsonObject) -> JsonObject:
    """Who traced this rank and which numbers are its own (`node_tracer` in each section)."""
    return {
        "node_rank": env.node_rank,
        "traced_by": "local rank 0",
        "local_ranks_traced": env.local_world_size,
        "bpftrace_pid": shared["bpftrace_pid"],
        "traced_pids": shared["pids"],
        "rank_key": rank_key(env.local_rank),
        "scope": (
            "per rank: submissions, dispatches, latencies, threads, GPU runtime launches "
            "and queues, KFD ioctls, DRM jobs, page faults, mmap, reclaim, BO traffic in "
            "its processes (keyed by this rank's pid, queues and rank key); per node: "
            "window (first rank's start to last rank's stop), lost_events, "
            "dropped_updates, probe_cost, bpftrace, machine-wide counts (reclaim "
            "episodes_machine_wide, kswapd wake-ups, page migrations' totals, BO traffic "
            "in other contexts, jobs without a traced submission)"
        ),
    }


def restore_families(families: list[ProbeFamily], states: JsonObject) -> None:
    """Give a rank's own family instances what local rank 0's kept from rendering."""
    for family in families:
        state = states.get(family.name)
        if isinstance(state, dict):
            family.restore_state(state)


def node_target(ranks: list[JsonObject]) -> TraceTarget:
    """One target for a node's ranks (slot = position = local rank): their pids, thread labels
    keyed by pid, doorbells with queue numbers moved to slot * QUEUE_STRIDE + queue."""
    labels: dict[int, str] = {}
    bells: list[tuple[int, int, int, int]] = []
    for slot, rank in enumerate(ranks):
        pid = int(rank["pid"])
        for w in rank["workers"]:
            queue = int(w["queue"])
            if not 0 <= queue < QUEUE_STRIDE:
                raise ValueError(f"queue {queue} of pid {pid} is outside 0..{QUEUE_STRIDE - 1}")
            labels[int(w["tid"])] = f"p{pid}/q{queue}"
            if w.get("doorbell_fd") is not None:
                bells.append((pid, int(w["doorbell_fd"]), int(w["tid"]), slot * QUEUE_STRIDE + queue))
        if rank.get("submitter_tid"):
            labels[int(rank["submitter_tid"])] = f"p{pid}/{SUBMITTER_LABEL}"
    return TraceTarget(
        pids=tuple(int(r["pid"]) for r in ranks),
        follow_children=True,
        thread_labels=labels,
        doorbells=tuple(bells),
        window_ranks=len(ranks),
        rank_keys=True,
    )


def _own_threads(backend: Any) -> JsonObject:
    """This rank's pid, queue workers (tid, queue, doorbell fd) and submitting thread, as the JSON
    it publishes in the store (`node_target` reads it on local rank 0)."""
    workers = [
        {"tid": w.tid, "queue": w.queue, "doorbell_fd": w.doorbell_fd} for w in backend.workers() if w.tid
    ]
    return {
        "pid": os.getpid(),
        "workers": workers,
        "submitter_tid": threading.get_native_id() if workers else None,
    }


def _published(output: SessionOutput, program: Program, bpftrace_pid: int | None) -> JsonObject:
    """What the other local ranks need to build their sections (JSON)."""
    data = {name: getattr(output, name) for name in _OUTPUT_FIELDS}
    data["helper_errors"] = [[*k, v] for k, v in output.helper_errors.items()]
    data.update(
        {
            "text": program.text,
            "token": program.token,
            "used_events": program.used_events,
            "missing": program.missing,
            "marker_event": program.marker_event,
            "bpftrace_pid": bpftrace_pid,
            "pids": list(program.target.pids) if program.target else [],
            "doorbells": len(program.target.doorbells) if program.target else 0,
        }
    )
    return data


def _output_from(data: JsonObject) -> SessionOutput:
    output = SessionOutput(**{name: data[name] for name in _OUTPUT_FIELDS})
    output.helper_errors = {
        (str(h), int(r), int(line), int(col)): int(n) for h, r, line, col, n in data.get("helper_errors", [])
    }
    return output


def _program_from(data: JsonObject, families: list[ProbeFamily]) -> Program:
    """The node's program as far as collecting needs it (this rank's families, restored)."""
    return Program(
        text=data["text"],
        token=int(data["token"]),
        families=families,
        used_events=data["used_events"],
        missing=data["missing"],
        marker_event=data["marker_event"],
    )


def _remote_readiness(described: JsonObject) -> engine.Readiness:
    """The lead's bpftrace as its sections describe it (this rank runs none)."""
    version = described.get("version")
    return engine.Readiness(
        ok=True,
        reason=None,
        bpftrace=described.get("path"),
        version=tuple(int(x) for x in version.split(".")) if version else None,  # type: ignore[arg-type]
        prefix=None,
        privilege=described.get("privilege") or "n/a (local rank 0 traces)",
        tracefs=None,
        tracefs_note=described.get("tracefs") or "n/a",
    )


def _store() -> Any:
    return distributed.default_store()
