"""What a QA run folder answers: a fingerprint of each question's content, kept in its response row, so a resumed
run can refuse a question set that changed under the same ids.

- `fingerprint(question) -> dict`: short digests of the question's parts (`context` with its images,
  `choices` = kind, candidate texts and labels, `gold`). `run_qa` writes it into every response row.
- `check_unchanged(path, done, questions)`: refuse to resume when a written row's fingerprint differs from its
  question's (naming the questions and the parts that changed), or when a row has none (written by an older
  version: what it answers cannot be checked).
- `missing_fields(row) -> list[str]`: what a response row lacks to be complete (a hand-cut or partial row).
- `disagreement(row, question) -> str | None`: what in a complete row contradicts its question or itself (a
  damaged or hand-edited `gold`, `correct`, `gold_nll`, `choice` or `labels`); `check_unchanged` refuses such a row
  naming its `file:line`.

The options that change scores (scorer, model, placement, dataset, chunk size) are the run's settings, checked
against `run.json` (`jetgym.runs.folder.check_settings`). Imports neither Hydra nor torch.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Sequence

from jetgym.scorers.types import logsumexp

FIELD = "fingerprint"
PARTS = {"context": "its context", "choices": "its choices", "gold": "its gold answer"}
# every response row of a scored question has these
SCORED_FIELDS = ("choice", "correct", "gold", "gold_nll", "labels", "logprobs", "probs", "usage")
NLL_TOLERANCE = 1e-6  # relative and absolute: gold_nll is recomputed from the row's own scores


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


def _gold_label(question: Any, labels: list) -> Any:
    """The question's gold answer as a label of the row (None: no gold)."""
    gold = question.gold
    if isinstance(gold, int) and 0 <= gold < len(labels):
        return labels[gold]
    return gold


def _gold_nll(row: dict, gold_labels: list) -> float:
    """-log of the gold labels' total probability, from the row's scores (or logprobs) and temperature."""
    scores = row.get("scores") or row["logprobs"]
    scaled = [s / row.get("temperature", 1.0) for s in scores]
    gold = [s for label, s in zip(row["labels"], scaled) if label in gold_labels]
    return logsumexp(scaled) - logsumexp(gold)


def disagreement(row: dict, question: Any) -> str | None:
    """What in a complete scored row contradicts its question or its own values; None when it agrees."""
    if isinstance(row.get("skipped"), str):
        return None
    labels = row["labels"]
    if not isinstance(labels, list) or len(labels) != len(row["logprobs"]) or len(labels) != len(row["probs"]):
        return "its labels, logprobs and probs differ in length"
    if question.labels is not None and list(question.labels) != labels:
        return f"its labels {labels} are not the question's {list(question.labels)}"
    if row["choice"] not in labels:
        return f"its choice {row['choice']!r} is none of its labels"
    gold = _gold_label(question, labels)
    if row["gold"] != gold:
        return f"its gold {row['gold']!r} is not the question's {gold!r}"
    if gold is None:
        return None if row["correct"] is None and row["gold_nll"] is None else "it grades a question without gold"
    gold_labels = row.get("gold_labels") or [gold]
    if row["correct"] is not (row["choice"] in gold_labels):
        return f"its correct {row['correct']!r} does not follow from choice {row['choice']!r} and gold {gold!r}"
    nll = row["gold_nll"]
    try:
        expected = _gold_nll(row, gold_labels)
    except (TypeError, ValueError, ZeroDivisionError):
        return "its logprobs or scores are not numbers"
    if (
        isinstance(nll, bool)
        or not isinstance(nll, (int, float))
        or not math.isclose(nll, expected, rel_tol=NLL_TOLERANCE, abs_tol=NLL_TOLERANCE)
    ):
        return f"its gold_nll {nll!r} is not the {expected:.6g} its scores give"
    return None


def _line_of(path: Path, qid: str) -> int | str:
    """The line of `path` holding the response to `qid` (for the error message)."""
    for line_no, raw in enumerate(Path(path).read_bytes().split(b"\n"), 1):
        try:
            row = json.loads(raw) if raw.strip() else None
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("id") == qid:
            return line_no
    return "?"


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
        _check_agreement(path, done, by_id)
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


def _check_agreement(path: Path, done: dict[str, dict], by_id: dict[str, Any]) -> None:
    """Refuse the first row that contradicts its question (damaged or hand-edited), naming `file:line`."""
    for qid, row in done.items():
        problem = disagreement(row, by_id[qid])
        if problem:
            raise ValueError(
                f"{path}:{_line_of(path, qid)}: the response to {qid!r} does not agree with its question "
                f"({problem}): the line was damaged or edited; delete that line to score the question again, "
                f"or use a fresh output_dir"
            )
