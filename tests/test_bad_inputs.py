"""Every bad input a user can give, and the error it gets: the exception type and a fragment that names the
field and the fix. One table per entry point (questions, scorer options, question files, model specs,
agents, job configs, results folders). Issue 12 lists the ones that were unclear or silently accepted."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from jetgym.agents import make_agent
from jetgym.questions.sets import QuestionSetError, load_jsonl
from jetgym.scorers.jet import JetOptions
from jetgym.scorers.models import ModelNotFoundError, resolve
from jetgym.scorers.options import ScorerOptions
from jetgym.scorers.placement import Placement
from jetgym.scorers.types import Question
from jetgym.scripts.config import compose, to_config
from jetgym.runs.folder import FolderInUseError, folder_lock, make_folder
from jetgym.scripts.cli import check_output_dir_argument

USER = {"role": "user", "content": "hi"}

# (case id, Question keyword arguments, exception type, expected fragment of the message)
QUESTIONS = [
    # issue 12, item 8: unclear errors
    (
        "message-text-not-content",
        {"context": [{"role": "user", "text": "hi"}], "candidates": ["a"]},
        ValueError,
        "chat message 0 needs 'role' and 'content'; it lacks 'content' (it has 'role', 'text'): write {'role': ..., 'content': ...}",
    ),
    (
        "message-content-none",
        {"context": [{"role": "user", "content": None}], "candidates": ["a"]},
        TypeError,
        "chat message 0 'content' must be a string (or a list of {'type': ...} parts), got NoneType None",
    ),
    (
        "message-content-int",
        {"context": [{"role": "user", "content": 3}], "candidates": ["a"]},
        TypeError,
        "chat message 0 'content' must be a string (or a list of {'type': ...} parts), got int 3",
    ),
    (
        "context-none",
        {"context": None, "candidates": ["a"]},
        TypeError,
        "question context must be one string or a list of chat messages {'role': ..., 'content': ...}, got NoneType",
    ),
    (
        "context-int",
        {"context": 7, "candidates": ["a"]},
        TypeError,
        "question context must be one string or a list of chat messages",
    ),
    (
        "context-list-of-strings",
        {"context": ["hello", "there"], "candidates": ["a"]},
        TypeError,
        "chat message 0 must be a mapping {'role': ..., 'content': ...}, got str 'hello' (a plain text context is one string",
    ),
    (
        "lone-surrogate-context",
        {"context": "caf\udce9", "candidates": ["a"]},
        ValueError,
        "question context holds a lone surrogate '\\udce9' at position 3: not valid Unicode text",
    ),
    (
        "lone-surrogate-content",
        {"context": [{"role": "user", "content": "x\ud800"}], "candidates": ["a"]},
        ValueError,
        "chat message 0 content holds a lone surrogate",
    ),
    (
        "lone-surrogate-candidate",
        {"context": "q", "candidates": ["ok", "b\ud800"]},
        ValueError,
        "candidate holds a lone surrogate '\\ud800' at position 1",
    ),
    # issue 12, item 9: silently accepted before
    (
        "candidates-one-string",
        {"context": "q", "candidates": "abc"},
        TypeError,
        "candidates must be a list of texts, not one string 'abc': write ['abc']",
    ),
    (
        "images-one-path",
        {"context": "q", "candidates": ["a"], "images": "/x.png"},
        TypeError,
        "images must be a list of images (arrays or paths), not one path '/x.png': write ['/x.png']",
    ),
    (
        "images-one-array",
        {"context": "q", "candidates": ["a"], "images": np.zeros((4, 4, 3), np.uint8)},
        TypeError,
        "images must be a list of images, not one image: write [image]",
    ),
    (
        "role-wizard",
        {"context": [{"role": "wizard", "content": "hi"}], "candidates": ["a"]},
        ValueError,
        "unknown chat message 0 role 'wizard'; known: system, user, assistant, tool",
    ),
    (
        "message-unknown-key",
        {"context": [{"role": "user", "content": "hi", "contnet": "x"}], "candidates": ["a"]},
        ValueError,
        "chat message 0 has unknown key(s) 'contnet'",
    ),
    (
        "labels-not-strings",
        {"context": "q", "candidates": ["a", "b"], "labels": [1, 2]},
        TypeError,
        "every label must be a non-empty string, got 1",
    ),
    (
        "labels-one-string",
        {"context": "q", "candidates": ["a", "b"], "labels": "AB"},
        TypeError,
        "labels must be a list of texts, not one string 'AB'",
    ),
    (
        "gold-bool",
        {"context": "q", "candidates": ["a", "b"], "gold": True},
        TypeError,
        "gold must be a label (string) or a candidate index (int), got True",
    ),
    # handled before issue 12
    ("context-empty", {"context": "", "candidates": ["a"]}, ValueError, "question context is empty"),
    ("context-no-messages", {"context": [], "candidates": ["a"]}, ValueError, "question context has no messages"),
    ("candidates-empty", {"context": "q", "candidates": []}, ValueError, "candidate list is empty"),
    (
        "candidate-empty-text",
        {"context": "q", "candidates": ["a", ""]},
        ValueError,
        "every candidate must be a non-empty string, got ''",
    ),
    ("categorical-without-candidates", {"context": "q"}, ValueError, "a categorical question needs candidates"),
    (
        "binary-three",
        {"context": "q", "candidates": ["a", "b", "c"], "kind": "binary"},
        ValueError,
        "a binary question needs exactly 2 candidates (false, true), got 3",
    ),
    (
        "ordinal-duplicates",
        {"context": "q", "candidates": ["a", "a"], "kind": "ordinal"},
        ValueError,
        "ordinal candidate texts must be distinct",
    ),
    (
        "unknown-kind",
        {"context": "q", "candidates": ["a"], "kind": "multi"},
        ValueError,
        "unknown question kind 'multi'; known: categorical, binary, ordinal",
    ),
    (
        "labels-mismatch",
        {"context": "q", "candidates": ["a", "b"], "labels": ["A"]},
        ValueError,
        "labels must match the candidates one to one",
    ),
    (
        "labels-duplicate",
        {"context": "q", "candidates": ["a", "b"], "labels": ["A", "A"]},
        ValueError,
        "labels must be distinct",
    ),
    # issue 27, item 5: mappings where lists belong, empty chat content
    (
        "candidates-mapping",
        {"context": "q", "candidates": {"a": 1, "b": 2}},
        TypeError,
        "candidates must be a list of texts, not a mapping {'a': 1, 'b': 2}: pass a list (for a {label: text} mapping m: "
        "candidates=list(m.values()), labels=list(m))",
    ),
    (
        "labels-mapping",
        {"context": "q", "candidates": ["x", "y"], "labels": {"A": 0, "B": 1}},
        TypeError,
        "labels must be a list of texts, not a mapping {'A': 0, 'B': 1}",
    ),
    (
        "content-empty",
        {"context": [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}], "candidates": ["a", "b"]},
        ValueError,
        "chat message 0 (system) has empty content: give it a text, or leave the message out",
    ),
    (
        "content-whitespace",
        {"context": [{"role": "user", "content": " \n\t"}], "candidates": ["a", "b"]},
        ValueError,
        "chat message 0 (user) has empty content (only whitespace): give it a text, or leave the message out",
    ),
    (
        "context-whitespace",
        {"context": "   ", "candidates": ["a", "b"]},
        ValueError,
        "question context is empty (only whitespace): give the question's text",
    ),
]


@pytest.mark.parametrize("kwargs,error,fragment", [case[1:] for case in QUESTIONS], ids=[case[0] for case in QUESTIONS])
def test_bad_question(kwargs, error, fragment):
    with pytest.raises(error) as caught:
        Question(**kwargs)
    assert fragment in str(caught.value)


def test_good_questions_still_pass():
    Question(context=[{"role": "system", "content": "be brief"}, USER], candidates=["a"])
    Question(
        context=[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what?"}]}],
        candidates=["a"],
        images=[np.zeros((4, 4, 3), np.uint8)],
    )
    Question(context="q", candidates=("a", "b"), labels=("A", "B"), gold="A", images=["/x.png"])


OPTIONS = [
    ("max_batch_tokens-none", {"max_batch_tokens": None}, "max_batch_tokens must be an integer >= 1, got None"),
    ("max_batch_tokens-string", {"max_batch_tokens": "100"}, "max_batch_tokens must be an integer >= 1, got '100'"),
    ("max_batch_tokens-float", {"max_batch_tokens": 2.5}, "max_batch_tokens must be an integer >= 1, got 2.5"),
    ("max_batch_tokens-bool", {"max_batch_tokens": True}, "max_batch_tokens must be an integer >= 1, got True"),
    ("max_batch_tokens-zero", {"max_batch_tokens": 0}, "max_batch_tokens must be at least 1, got 0"),
    (
        "min_shared_prefix-negative",
        {"min_shared_prefix": -1},
        "min_shared_prefix must be an integer >= 0 (0: no sharing), got -1",
    ),
    (
        "min_shared_prefix-float",
        {"min_shared_prefix": 1.5},
        "min_shared_prefix must be an integer >= 0 (0: no sharing), got 1.5",
    ),
    (
        "binary_texts-string",
        {"binary_texts": "ny"},
        "binary_texts must be a (false, true) pair of texts, got the string 'ny'",
    ),
    ("binary_texts-equal", {"binary_texts": ("x", "x")}, "binary candidate texts must be distinct"),
    ("schedule", {"schedule": "fast"}, "unknown schedule 'fast'; known: auto"),
    ("template", {"template": "chatml"}, "unknown template 'chatml'; known: chat, none"),
    (
        "placement-device",
        {"placement": "gpu"},
        "unknown placement.device 'gpu'; known: cpu, cuda, auto, offload_experts",
    ),
    ("placement-dtype", {"placement": {"device": "cpu", "dtype": "fp8"}}, "unknown placement.dtype 'fp8'; known:"),
]


@pytest.mark.parametrize("kwargs,fragment", [case[1:] for case in OPTIONS], ids=[case[0] for case in OPTIONS])
def test_bad_scorer_option(kwargs, fragment):
    with pytest.raises((ValueError, TypeError)) as caught:
        ScorerOptions(**kwargs)
    assert fragment in str(caught.value)


def test_backend_options_keep_the_shared_checks():
    with pytest.raises(ValueError, match="max_batch_tokens must be an integer >= 1, got '100'"):
        JetOptions(max_batch_tokens="100")
    with pytest.raises(ValueError, match="unknown placement.device 'tpu'"):
        Placement.of("tpu")


def write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


ROW = json.dumps({"question": "2+2?", "choices": ["3", "4"], "answer": 1}).encode() + b"\n"
FILES = [
    # issue 12: a Latin-1 file (no file or line before), an empty file (exited 0 with accuracy n/a)
    (
        "latin-1",
        ROW + '{"question": "café?", "choices": ["a"], "answer": 0}\n'.encode("latin-1"),
        QuestionSetError,
        ":2: not UTF-8 text (byte 0xe9 at column 18); re-save the file as UTF-8",
    ),
    ("empty", b"", QuestionSetError, ": no questions found (the file is empty or holds only blank lines)"),
    ("blank-lines", b"\n  \n", QuestionSetError, ": no questions found"),
    (
        "escaped-lone-surrogate",
        b'{"question": "q\\ud800", "choices": ["a"], "answer": 0}\n',
        QuestionSetError,
        ":1: question context holds a lone surrogate",
    ),
    # handled before issue 12
    ("not-json", ROW + b"{oops\n", QuestionSetError, ":2: not valid JSON"),
    ("not-an-object", b"[1, 2]\n", QuestionSetError, ":1: expected a JSON object, got list"),
    ("missing-field", b'{"question": "q", "choices": ["a"]}\n', QuestionSetError, ":1: missing field 'answer'"),
    (
        "answer-out-of-range",
        b'{"question": "q", "choices": ["a"], "answer": 3}\n',
        QuestionSetError,
        ":1: answer index 3 is out of range for 1 choices",
    ),
    (
        "choices-one-string",
        b'{"question": "q", "choices": "ab", "answer": 0}\n',
        QuestionSetError,
        ":1: 'choices' must be a non-empty list of strings",
    ),
    (
        "duplicate-id",
        b'{"question": "q", "choices": ["a"], "answer": 0, "id": "x"}\n' * 2,
        QuestionSetError,
        ":2: duplicate id 'x' (first on line 1)",
    ),
]


@pytest.mark.parametrize("data,error,fragment", [case[1:] for case in FILES], ids=[case[0] for case in FILES])
def test_bad_question_file(tmp_path, data, error, fragment):
    path = write(tmp_path, "set.jsonl", data)
    with pytest.raises(error) as caught:
        load_jsonl(path)
    assert f"{path}{fragment}" in str(caught.value)


def test_a_missing_question_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"question file .*nope\.jsonl does not exist"):
        load_jsonl(str(tmp_path / "nope.jsonl"))
    with pytest.raises(
        ValueError, match=r"question set 'jsonl' needs a path \(dataset.path=/path/to/questions.jsonl\)"
    ):
        load_jsonl(None)


def test_a_byte_order_mark_is_accepted(tmp_path):
    assert len(load_jsonl(write(tmp_path, "bom.jsonl", b"\xef\xbb\xbf" + ROW))) == 1


def test_bad_model_specs(tmp_path, monkeypatch):
    empty = tmp_path / "empty-model"
    empty.mkdir()
    with pytest.raises(
        ModelNotFoundError,
        match=r"model folder .*empty-model' has no config.json \(it is empty\): not a "
        r"Hugging Face model folder; point model at a folder written by save_pretrained",
    ):
        resolve(str(empty))
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ModelNotFoundError, match="is a file, not a folder: pass the folder that holds config.json"):
        resolve(str(tmp_path / "weights.bin"))
    # a relative path that does not exist (was taken as a hub id: ~25 s of retries)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    started = time.monotonic()
    with pytest.raises(
        ModelNotFoundError,
        match=r"model folder 'models/my-model' does not exist \(resolved to .*models/my-model\); "
        r"check the path, or write a hub id as owner/name",
    ):
        resolve("models/my-model")
    with pytest.raises(ModelNotFoundError, match="model folder './my-model' does not exist"):
        resolve("./my-model")
    assert time.monotonic() - started < 2
    with pytest.raises(
        ModelNotFoundError, match="unknown model spec 'smollm2-135m'.*Did you mean 'smollm2-135m-instruct'"
    ):
        resolve("smollm2-135m")
    with pytest.raises(ModelNotFoundError, match="model spec must be a non-empty string"):
        resolve("")
    assert resolve("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"  # a hub id stays one


def test_bad_agents():
    with pytest.raises(
        ValueError, match=r"agent 'scorer' needs scorer, got None \(build one with jetgym.scorers.make_scorer\)"
    ):
        make_agent("scorer", scorer=None)
    with pytest.raises(TypeError, match="agent 'scorer' needs a scorer with decide_many"):
        make_agent("scorer", scorer="jet")
    with pytest.raises(LookupError, match="unknown agent 'smart'"):
        make_agent("smart")


CONFIGS = [
    ("qa", "on_error=ignore", "unknown on_error 'ignore'; known: stop, skip"),
    ("qa", "chunk_size=0", "chunk_size must be >= 1, got 0"),
    ("qa", "dataset.limit=0", "dataset.limit must be >= 1, got 0"),
    ("qa", "dataset.subset=half", "unknown dataset.subset 'half'"),
    ("qa", "scorer.max_batch_tokens=0", "max_batch_tokens must be at least 1, got 0"),
    ("qa", "placement.device=gpu", "unknown placement.device 'gpu'"),
    ("episode", "episodes=0", "episodes must be >= 1, got 0"),
]


@pytest.mark.parametrize("job,override,fragment", CONFIGS, ids=[f"{c[0]}-{c[1]}" for c in CONFIGS])
def test_bad_job_config(job, override, fragment):
    with pytest.raises(Exception) as caught:
        to_config(compose(job, [override]))
    assert fragment in str(caught.value)


def test_an_unwritable_output_dir(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    for bad in (tmp_path / "a-file" / "out", Path("/proc/jetgym-no-such/out")):
        with pytest.raises(
            PermissionError, match=rf"cannot create output_dir {bad} \(.*\); choose a writable output_dir"
        ):
            make_folder(bad)
        with pytest.raises(SystemExit) as caught:
            check_output_dir_argument(["dataset.limit=3", f"output_dir={bad}"], "jetgym-qa")
        assert caught.value.code == 2 and capsys.readouterr().err.startswith(
            f"jetgym-qa: cannot create output_dir {bad}"
        )
    check_output_dir_argument(["output_dir=outputs/${now:%H}"], "jetgym-qa")  # interpolations are Hydra's


@pytest.mark.parametrize("job", ["qa", "episode"])
def test_an_unwritable_output_dir_from_the_command_line(tmp_path, job):
    (tmp_path / "a-file").write_text("")
    done = subprocess.run(
        [sys.executable, "-m", f"jetgym.scripts.{job}", f"output_dir={tmp_path / 'a-file' / 'out'}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"jetgym-{job}: cannot create output_dir {tmp_path / 'a-file' / 'out'} (Not a directory); choose a writable output_dir"
    )


def test_an_empty_question_set_is_refused_by_jetgym_qa(tmp_path, fake_scorer):
    from jetgym.scripts.qa import qa_job

    path = write(tmp_path, "empty.jsonl", b"")
    with pytest.raises(QuestionSetError, match="no questions found"):
        qa_job(
            compose(
                "qa", [f"output_dir={tmp_path / 'out'}", "scorer.name=fake", "dataset=jsonl", f"dataset.path={path}"]
            )
        )
    assert not (tmp_path / "out" / "summary.json").exists()


def episode_config(out, *overrides):
    return compose(
        "episode",
        ["env.kwargs.episode_timeout=48", "episodes=1", f"output_dir={out}", "agent=random", "video=false", *overrides],
    )


def test_an_episode_folder_with_old_gifs_is_refused(tmp_path):
    pytest.importorskip("vizdoom")
    from jetgym.scripts.episode import episode_job

    (tmp_path / "episode_000.gif").write_bytes(b"GIF89a")
    with pytest.raises(
        FileExistsError,
        match=r"already holds episode results \(episode_000.gif\); choose a new output_dir "
        r"\(nothing was overwritten\)",
    ):
        episode_job(episode_config(tmp_path), quiet=True)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["episode_000.gif"]


def test_an_episode_folder_in_use_is_refused(tmp_path):
    from jetgym.scripts.episode import episode_job

    with folder_lock(tmp_path, "jetgym-episode"):
        with pytest.raises(FolderInUseError, match=r"is in use by jetgym-episode \(pid \d+\)"):
            episode_job(episode_config(tmp_path), quiet=True)
    assert not (tmp_path / "steps.jsonl").exists()
