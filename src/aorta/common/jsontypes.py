"""`JsonObject`: the one name for a dict that is JSON (parsed, or about to be written as such).

Inside the process, data is a dataclass; a `dict[str, Any]` is right only at the JSON edge, and
this name says that it stands there (docs/architecture.md, "Types"; tests/test_types.py).
"""

from __future__ import annotations

from typing import Any, TypeAlias

JsonObject: TypeAlias = dict[str, Any]
