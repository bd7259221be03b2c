"""The soak's report: a table on stdout and the same as JSON in a file."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.soak.checks import Verdict

SHOWN_PER_VIOLATION = 8


def table(title: str, verdict: Verdict, faults: Mapping[str, int]) -> str:
    width = max(len(what) for what, _, _ in verdict.rows) + 2
    lines = [title, "=" * len(title), f"{'':{width}}{'count':>7}  must be"]
    for what, count, expect in verdict.rows:
        bad = expect != "" and str(count) != expect
        mark = "  <-- VIOLATION" if bad else ""
        lines.append(f"{what:{width}}{count:>7}  {expect or '-'}{mark}")
    lines.append("")
    lines.append("faults injected: " + ", ".join(f"{k}={v}" for k, v in sorted(faults.items())))
    for name, details in verdict.violations.items():
        if not details:
            continue
        lines.append(f"\n{name} ({len(details)}):")
        lines += [f"  - {d}" for d in details[:SHOWN_PER_VIOLATION]]
        if len(details) > SHOWN_PER_VIOLATION:
            lines.append(f"  … and {len(details) - SHOWN_PER_VIOLATION} more (see the JSON report)")
    lines.append("\n" + ("PASS" if verdict.ok else "FAIL: violations above"))
    return "\n".join(lines)


def as_json(
    variant: str, verdict: Verdict, faults: Mapping[str, int], extra: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "variant": variant,
        "ok": verdict.ok,
        "table": [{"what": w, "count": c, "must_be": e or None} for w, c, e in verdict.rows],
        "faults": dict(sorted(faults.items())),
        "violations": {k: v for k, v in verdict.violations.items() if v},
        **extra,
    }


def write(path: Path, report: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
