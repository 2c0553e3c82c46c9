"""What a QA run folder answers: a fingerprint of each question's content, kept in its response row, so a resumed
run can refuse a question set that changed under the same ids.

- `fingerprint(question) -> dict`: short digests of the question's parts (`context` with its images,
  `choices` = kind, candidate texts and labels, `gold`). `run_qa` writes it into every response row.
- `check_unchanged(path, done, questions)`: refuse to resume when a written row's fingerprint differs from its
  question's (naming the questions and the parts that changed), or when a row has none (written by an older
  version: what it answers cannot be checked).
- `missing_fields(row) -> list[str]`: what a response row lacks to be complete (a hand-cut or partial row).

The options that change scores (scorer, model, placement, dataset, chunk size) are the run's settings, checked
against `run.json` (`jetgym.runs.folder.check_settings`). Imports neither Hydra nor torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Sequence

FIELD = "fingerprint"
PARTS = {"context": "its context", "choices": "its choices", "gold": "its gold answer"}
SCORED_FIELDS = ("choice", "labels", "logprobs", "probs", "usage")  # every response row of a scored question has these


def _plain(value: Any) -> Any:
    """JSON for what a question holds: arrays and images by their bytes' digest, paths as text."""
    if hasattr(value, "tobytes"):
        shape = getattr(value, "shape", None) or getattr(value, "size", None)
        return {
            "bytes": hashlib.sha256(value.tobytes()).hexdigest(),
            "shape": repr(shape),
            "type": str(getattr(value, "dtype", getattr(value, "mode", type(value).__name__))),
        }
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return repr(value)


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=_plain, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def fingerprint(question: Any) -> dict[str, str]:
    """Digests of the parts of a question that decide its response (never its id or source)."""
    return {
        "context": _digest([question.context, list(question.images)]),
        "choices": _digest([question.kind, question.candidates, question.labels]),
        "gold": _digest(question.gold),
    }


def missing_fields(row: dict) -> list[str]:
    """The fields a complete response row has and this one lacks (none for a complete or a skipped row)."""
    if isinstance(row.get("skipped"), str):
        return []
    return [name for name in SCORED_FIELDS if name not in row]


def _from_row_order(question: Any) -> bool:
    """Whether the id looks derived from the row's position (`{file stem}-{index}`, the JSONL loader's default)."""
    source = getattr(question, "source", None) or ""
    stem = Path(source.rsplit(":", 1)[0]).stem if ":" in source else ""
    return bool(stem) and re.fullmatch(rf"{re.escape(stem)}-\d+", question.id or "") is not None


def check_unchanged(path: Path, done: dict[str, dict], questions: Sequence[Any]) -> None:
    """Refuse to resume when a question answered in `path` (rows `done`, by id) is not the question of that id now."""
    by_id = {q.id: q for q in questions}
    unchecked = [i for i, row in done.items() if not isinstance(row.get(FIELD), dict)]
    if unchecked:
        raise ValueError(
            f"{path} holds {len(unchecked)} responses without a question fingerprint (e.g. "
            f"{unchecked[0]!r}; written by an older jetgym): what they answer cannot be checked, so the "
            f"run cannot resume; use a fresh output_dir"
        )
    changed = []
    for qid, row in done.items():
        now = fingerprint(by_id[qid])
        parts = [PARTS[part] for part in PARTS if row[FIELD].get(part) != now[part]]
        if parts:
            changed.append((by_id[qid], parts))
    if not changed:
        return
    shown = "; ".join(
        f"{q.id!r}" + (f" ({q.source})" if q.source else "") + f": {', '.join(parts)}" for q, parts in changed[:3]
    )
    more = f"; ... ({len(changed)} questions)" if len(changed) > 3 else ""
    order = ""
    if any(_from_row_order(q) for q, _ in changed):
        order = (
            " The ids come from row order (the file gives no 'id'), so a row inserted or removed renumbers "
            "every later question: give each question an 'id'."
        )
    raise ValueError(
        f"{path} answers another version of these questions ({shown}{more}): resuming would mix "
        f"answers to both; restore the questions or use a fresh output_dir.{order}"
    )
