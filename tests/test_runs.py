"""The runners and their run-folder layer, called with objects (no Hydra): `jetgym.runs`."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from jetgym.runs import folder
from jetgym.runs.qa import run_qa
from jetgym.scorers import Question, make_scorer

LIBRARY_DOC = Path(__file__).resolve().parents[1] / "docs" / "library.md"


def readme_block(marker: str) -> str:
    return next(b for b in re.findall(r"```python\n(.*?)```", LIBRARY_DOC.read_text(), re.S) if marker in b)


def test_import_jetgym_runners_without_hydra_or_torch():
    code = (
        "import sys, jetgym; from jetgym import run_qa, run_episodes; import jetgym.runs.folder; "
        "print(sorted(m for m in ('hydra', 'omegaconf', 'torch', 'gymnasium') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_readme_run_qa_example_runs_with_a_fake_scorer(tmp_path, monkeypatch, fake_scorer):
    code = readme_block("run_qa(")
    assert 'make_scorer("jet")' in code
    monkeypatch.chdir(tmp_path)
    exec(code.replace('make_scorer("jet")', 'make_scorer("fake")'), {})
    rows = folder.read_jsonl(tmp_path / "results/my-set/responses.jsonl")
    assert [row["id"] for row in rows] == ["sum", "city"]
    summary = json.loads((tmp_path / "results/my-set/summary.json").read_text())
    assert summary["requests"] == 2 and summary["dataset"]["name"] == "questions"
    assert summary["scorer"]["name"] == "fake"
    # a rerun resumes: nothing is scored again, the responses stay as they were
    before = (tmp_path / "results/my-set/responses.jsonl").read_bytes()
    exec(code.replace('make_scorer("jet")', 'make_scorer("fake")'), {})
    assert (tmp_path / "results/my-set/responses.jsonl").read_bytes() == before
    assert json.loads((tmp_path / "results/my-set/summary.json").read_text())["requests_this_run"] == 0


def test_readme_run_episodes_example_writes_its_files(tmp_path, monkeypatch):
    pytest.importorskip("gymnasium")
    pytest.importorskip("PIL")
    monkeypatch.chdir(tmp_path)
    exec(readme_block("run_episodes("), {})
    out = tmp_path / "results/frozenlake"
    episodes = folder.read_jsonl(out / "episodes.jsonl")
    assert [e["episode"] for e in episodes] == [0, 1] and [e["seed"] for e in episodes] == [0, 1]
    assert sum(e["length"] for e in episodes) == len(folder.read_jsonl(out / "steps.jsonl"))
    assert all((out / e["video"]).stat().st_size > 0 for e in episodes)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env"]["id"] == "FrozenLake-v1" and summary["agent"]["name"] == "RandomAgent"
    with pytest.raises(FileExistsError, match="already holds episode results"):
        exec(readme_block("run_episodes("), {})


def test_a_scorer_factory_is_not_called_for_a_refused_run(tmp_path, fake_scorer):
    questions = [Question(context="2 + 2 =", candidates=[" 4", " 5"], gold=0, id="q")]
    run_qa(questions, make_scorer("fake"), tmp_path, settings={"model": "a"}, quiet=True)
    called = []
    with pytest.raises(ValueError, match=r"other settings \(model\)"):
        run_qa(questions, lambda: called.append(1), tmp_path, settings={"model": "b"}, quiet=True)
    assert called == []


@pytest.mark.parametrize(
    "questions, options, message",
    [
        ([], {}, "run_qa got no questions"),
        ([Question(context="x", candidates=["a", "b"])], {}, r"questions\[0\] has no string id"),
        ([Question(context="x", candidates=["a", "b"], id="q")] * 2, {}, r"questions\[1\] repeats the id 'q'"),
        (
            [Question(context="x", candidates=["a", "b"], id="q")],
            {"chunk_size": 0},
            "chunk_size must be an integer >= 1",
        ),
        (
            [Question(context="x", candidates=["a", "b"], id="q")],
            {"on_error": "ignore"},
            "on_error must be one of stop, skip",
        ),
    ],
)
def test_run_qa_refuses_bad_arguments_by_name(tmp_path, fake_scorer, questions, options, message):
    with pytest.raises(ValueError, match=message):
        run_qa(questions, make_scorer("fake"), tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()


def test_write_json_is_strict_atomic_and_leaves_no_temporary(tmp_path):
    path = folder.write_json(tmp_path / "summary.json", {"b": 1, "a": [1.5]})
    assert path.read_text() == '{\n  "a": [\n    1.5\n  ],\n  "b": 1\n}\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~folder._umask()
    with pytest.raises(ValueError, match=r"the summary holds a non-finite number .*: x\.y = nan"):
        folder.write_json(path, {"x": {"y": float("nan")}}, what="the summary")
    assert json.loads(path.read_text()) == {"a": [1.5], "b": 1}  # the old file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_write_text_keeps_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    path = folder.write_text(tmp_path / "report.md", "old\n")

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match=r"no space left to write .*report.md"):
        folder.write_text(path, "new\n")
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_read_jsonl_cuts_a_torn_last_line_and_never_returns_it(tmp_path):
    path = tmp_path / "rows.jsonl"
    folder.append_jsonl(path, [{"id": "a"}, {"id": "b"}])
    with open(path, "a") as sink:
        sink.write('{"id": "c", "sco')
    assert folder.read_jsonl(path) == [{"id": "a"}, {"id": "b"}]
    assert path.read_text() == '{"id": "a"}\n{"id": "b"}\n'  # cut off: the next append starts a clean line
    path.write_text('{"id": "a"}\n{"id": "b"}')  # a complete last line lacking its newline counts, and gets one
    assert folder.read_jsonl(path) == [{"id": "a"}, {"id": "b"}] and path.read_text().endswith("}\n")
    assert folder.read_jsonl(tmp_path / "missing.jsonl") == []


def test_read_jsonl_refuses_a_bad_line_before_the_end_naming_it(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"id": "a"}\n{"id": \n{"id": "c"}\n')
    with pytest.raises(ValueError, match=r"rows\.jsonl:2: corrupt step line before the end of the file"):
        folder.read_jsonl(path, what="step")
    path.write_text('{"id": "a"}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"rows\.jsonl:2: a row must be a JSON object"):
        folder.read_jsonl(path)


def test_append_jsonl_names_the_row_with_a_non_finite_number(tmp_path):
    with pytest.raises(ValueError, match=r"row 'q2' holds a non-finite number .*: p = inf"):
        folder.append_jsonl(
            tmp_path / "r.jsonl",
            [{"id": "q1", "p": 1.0}, {"id": "q2", "p": float("inf")}],
            what=lambda row: f"row {row['id']!r}",
        )
    assert not (tmp_path / "r.jsonl").exists()  # one write: nothing of the batch lands


def test_refuse_results_lists_what_the_folder_holds(tmp_path):
    folder.refuse_results(tmp_path, ["steps*.jsonl"])  # nothing there: no error
    for name in ("steps.jsonl", "steps.rank-0-of-2.jsonl", "notes.txt"):
        (tmp_path / name).write_text("")
    with pytest.raises(
        FileExistsError,
        match=r"already holds episode results \(steps\.jsonl, steps\.rank-0-of-2\.jsonl\); "
        r"choose a new output_dir \(nothing was overwritten\)",
    ):
        folder.refuse_results(tmp_path, ["steps*.jsonl"], what="episode results")


def test_check_settings_names_the_dotted_keys_that_differ(tmp_path):
    path = folder.write_json(tmp_path / "run.json", {"model": {"spec": "a", "dtype": "fp32"}, "chunk_size": 4})
    folder.check_settings(path, {"model": {"spec": "a", "dtype": "fp32"}, "chunk_size": 4})
    folder.check_settings(tmp_path / "none.json", {"anything": 1})  # no record: nothing to check
    with pytest.raises(
        ValueError, match=r"holds a run with other settings \(chunk_size, model\.spec\); use a fresh output_dir"
    ):
        folder.check_settings(path, {"model": {"spec": "b", "dtype": "fp32"}, "chunk_size": 8})
    folder.write_json(path, {"model": "a"})  # an older record without chunk_size: the default fills it in
    folder.check_settings(path, {"model": "a", "chunk_size": 16}, defaults={"chunk_size": 16})
