"""Multi-point result files (sweep, policy-sweep) rewritten atomically after every point.

The file is always valid JSON: a crash or kill -9 loses at most the point in flight. `--resume`
reuses points whose key and configuration fingerprint match and whose status is ok.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from aorta.common.atomicio import (
    WriteError,
    atomic_write_json,
    check_replaceable,
    keep_unsaved,
    read_json_file,
    read_owned_json,
)
from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.results.provenance import tool_info
from aorta.hw_queue_eval.results.run_result import utc_timestamp
from aorta.hw_queue_eval.results.schema import SCHEMA_VERSION
from aorta.hw_queue_eval.results.validation import duplicate_point, point_problem


def fingerprint(config: JsonObject) -> str:
    """A short stable hash of the settings that must match for a point to be reused."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _key_text(key: JsonObject) -> str:
    return json.dumps(key, sort_keys=True)


class CheckpointFile:
    """Points of one sweep-like run, each `{"key", "status", "error", "result", ...}`."""

    def __init__(self, path: str | os.PathLike[str], kind: str, header: JsonObject) -> None:
        self.path = path
        self.kind = kind
        self.header = header
        self.points: list[JsonObject] = []
        self.created = utc_timestamp()
        self.notes: list[str] = []  # what --resume set aside, for the command to show

    @classmethod
    def resume(cls, path: str | os.PathLike[str], kind: str, header: JsonObject) -> CheckpointFile:
        """Load an earlier file of the same kind and fingerprint (UsageError if it differs).

        As root, a file owned by another user is refused (a planted checkpoint's fake points
        would be reported as results).
        """
        data = read_owned_json(path, f"--resume: {kind} checkpoint")
        if not isinstance(data, dict) or data.get("kind") != kind:
            raise UsageError(
                f"--resume: {path} is not a {kind} file (kind "
                f"{data.get('kind') if isinstance(data, dict) else None!r})"
            )
        if data.get("fingerprint") != header.get("fingerprint"):
            raise UsageError(
                f"--resume: {path} was made with other settings (workload, size, "
                "iterations …); use the same options or another -o"
            )
        points = data.get("points")
        if not isinstance(points, list):
            raise UsageError(f"--resume: {path} has no list of points; use another -o")
        twice = duplicate_point(points)
        if twice is not None:
            raise UsageError(f"--resume: {path} was edited ({twice}); use another -o")
        file = cls(path, kind, header)
        if isinstance(data.get("created"), str):
            file.created = data["created"]
        for point in points:
            found = point_problem(point, kind)
            if found is None:
                file.points.append(point)
            else:  # never trusted as done: the point is measured again
                key = point.get("key") if isinstance(point, dict) else None
                file.notes.append(
                    f"resume: point {json.dumps(key)[:80]} in {path} is invalid "
                    f"({found}): it will be measured again"
                )
        from aorta.hw_queue_eval.readers.upgrade import upgrade

        # valid points in the current layout (a v1 file's points are read through the v1 reader)
        file.points = [
            p for p in upgrade({**data, "points": file.points}).get("points", []) if isinstance(p, dict)
        ]
        return file

    def done(self, key: JsonObject) -> bool:
        """True if a point with this key finished ok."""
        wanted = _key_text(key)
        return any(_key_text(p.get("key", {})) == wanted and p.get("status") == "ok" for p in self.points)

    def record(self, point: JsonObject, **extra: Any) -> None:
        """Add or replace the point with the same key, then rewrite the file atomically.

        `extra` top-level keys (e.g. a sweep's running analysis) are written in the same rewrite.
        """
        wanted = _key_text(point["key"])
        self.points = [p for p in self.points if _key_text(p.get("key", {})) != wanted]
        self.points.append(point)
        self.save(**extra)

    def to_dict(self, **extra: Any) -> JsonObject:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "tool": dict(tool_info()),
            "created": self.created,
            "updated": utc_timestamp(),
            **self.header,
            "points": self.points,
            **extra,
        }

    def save(self, **extra: Any) -> None:
        """Write the whole file atomically (temp file, fsync, rename).

        If the write fails (disk full), the file as it should be is kept in a private temp
        folder named in the one-line error, so the point just measured is not lost.
        """
        data = self.to_dict(**extra)
        try:
            atomic_write_json(self.path, data)
        except WriteError as exc:
            text = json.dumps(data, indent=2, allow_nan=False) + "\n"
            kept = keep_unsaved(os.path.basename(self.path), text.encode("utf-8"))
            where = f"kept in {kept}" if kept else "not kept (no room in the temp folder either)"
            raise WriteError(
                f"{exc}; the {self.kind} file with every finished point is {where}"
                f"{': --resume from it once there is room' if kept else ''}"
            ) from None


def open_or_resume(
    path: str | os.PathLike[str], kind: str, header: JsonObject, resume: bool
) -> CheckpointFile:
    """A fresh file, or the earlier one with --resume; never silently overwrites finished points."""
    if resume and os.path.exists(path):
        return CheckpointFile.resume(path, kind, header)
    kinds = (kind, "policy_sweep") if kind == "policy-sweep" else (kind,)  # the older spelling
    check_replaceable(path, kinds, False, f"{kind} file", "choose another -o")  # a run result …
    if os.path.exists(path):
        try:
            old = read_json_file(path, f"{kind} file")
        except UsageError:
            old = None
        finished = (
            [p for p in (old or {}).get("points", []) if isinstance(p, dict) and p.get("status") == "ok"]
            if isinstance(old, dict)
            else []
        )
        if finished:
            raise UsageError(
                f"{path} already holds {len(finished)} finished {kind} points: "
                "add --resume to continue it, or choose another -o"
            )
    return CheckpointFile(path, kind, header)
