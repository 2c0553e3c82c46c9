"""Console jobs (issue 27, items 3 and 4): a user error is one line `jetgym-<job>: ...` and exit status 2, a
programming error keeps its traceback, `HYDRA_FULL_ERROR=1` shows every traceback; `output_dir` null or empty
is refused by name; a refused run leaves the folder's `.hydra/` as it was. And the clearer messages: Hydra's
lexer error for `~`, a non-HDF5 LIBERO file, a model folder without a tokenizer or with truncated weights,
repeated action texts."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jetgym.runs.folder import FolderInUseError, folder_lock
from jetgym.scripts.cli import check_output_dir_argument, is_user_error, one_line

TESTS = Path(__file__).resolve().parent


def job(module: str, *args: str, env: dict | None = None, fail: bool = False) -> subprocess.CompletedProcess:
    """Run `jetgym.scripts.<module>.main()` in a fresh process with the tests' fake scorer registered (and
    failing on its first question with `fail`, a programming error). env: variables to set (None: unset)."""
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r}); import conftest\n"
        + ("conftest.FakeScorer.fail_after = 0\n" if fail else "")
        + f"from jetgym.scripts.{module} import main\nsys.argv = ['jetgym-{module}', *sys.argv[1:]]\nmain()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            key: value
            for key, value in {**os.environ, "HYDRA_FULL_ERROR": "0", **(env or {})}.items()
            if value is not None
        },
    )


def question_file(tmp_path) -> Path:
    path = tmp_path / "q.jsonl"
    path.write_text(
        "".join(
            json.dumps({"question": f"{n}+{n}?", "choices": [str(2 * n), str(n)], "answer": 0}) + "\n"
            for n in range(1, 6)
        )
    )
    return path


def qa_args(tmp_path, out, *more):
    return (f"output_dir={out}", "scorer.name=fake", "dataset=jsonl", f"dataset.path={question_file(tmp_path)}", *more)


def only_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


def hydra_files(folder: Path) -> dict:
    return {path.name: path.read_bytes() for path in sorted((folder / ".hydra").iterdir())}


def test_a_refused_run_leaves_the_folders_hydra_record_as_it_was(tmp_path):
    out = tmp_path / "out"
    first = job("qa", *qa_args(tmp_path, out, "chunk_size=2"))
    assert first.returncode == 0, first.stderr
    record = hydra_files(out)
    assert sorted(record) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
    assert b"chunk_size=2" in record["overrides.yaml"] and b"output_subdir=null" not in record["overrides.yaml"]
    assert b"output_subdir: .hydra" in record["hydra.yaml"]
    results = {name: (out / name).read_bytes() for name in ("responses.jsonl", "run.json", "summary.json")}

    other = job("qa", *qa_args(tmp_path, out, "chunk_size=3", "scorer.template=chat"))
    assert other.returncode == 2
    assert only_line(other) == (
        f"jetgym-qa: {out} holds a run with other settings (chunk_size, scorer.template); use a fresh output_dir"
    )
    with folder_lock(out, "jetgym-qa"):  # a run in progress
        locked = job("qa", *qa_args(tmp_path, out, "chunk_size=2"))
    assert locked.returncode == 2 and "is in use by jetgym-qa" in only_line(locked)
    assert hydra_files(out) == record
    assert {name: (out / name).read_bytes() for name in results} == results


def test_a_user_error_is_one_line_and_exit_2_and_hydra_full_error_shows_the_traceback(tmp_path):
    args = ("output_dir=" + str(tmp_path / "out"), "scorer.name=fake", "dataset=jsonl", "dataset.path=/nope/q.jsonl")
    done = job("qa", *args)
    assert done.returncode == 2
    assert only_line(done) == "jetgym-qa: question file /nope/q.jsonl does not exist"
    assert not (tmp_path / "out" / ".hydra").exists()
    full = job("qa", *args, env={"HYDRA_FULL_ERROR": "1"})
    assert full.returncode == 1 and "Traceback" in full.stderr and "FileNotFoundError: question file" in full.stderr


def test_a_programming_error_keeps_its_traceback(tmp_path):
    done = job("qa", *qa_args(tmp_path, tmp_path / "out"), fail=True)
    assert done.returncode == 1
    assert "RuntimeError: fake scorer stopped on purpose" in done.stderr and "jetgym-qa:" not in done.stderr
    assert "Set the environment variable HYDRA_FULL_ERROR=1" in done.stderr or "Traceback" in done.stderr


@pytest.mark.parametrize("value,shown", [("null", "null"), ("", "empty"), ("' '", "empty")])
def test_output_dir_null_or_empty_is_refused_by_name(tmp_path, monkeypatch, capsys, value, shown):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as caught:
        check_output_dir_argument([f"output_dir={value}"], "jetgym-qa")
    assert caught.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"jetgym-qa: output_dir is {shown}: set output_dir=/path/to/a/folder for the results (a null or empty "
        f"output_dir would write into a folder named 'null' or into the current folder)"
    )
    assert list(tmp_path.iterdir()) == []


def test_output_dir_null_from_the_command_line_writes_nothing(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "jetgym.scripts.qa", "output_dir=null"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and only_line(done).startswith("jetgym-qa: output_dir is null: set output_dir=")
    assert list(tmp_path.iterdir()) == []


def test_a_tilde_path_gets_a_hint(capsys):
    with pytest.raises(SystemExit):
        check_output_dir_argument(["dataset=jsonl", "dataset.path=~/q.jsonl"], "jetgym-qa")
    assert capsys.readouterr().err.strip() == (
        "jetgym-qa: cannot read the override 'dataset.path=~/q.jsonl' (LexerNoViableAltException: "
        "dataset.path=~/q.jsonl); Hydra does not expand ~: write the path out (dataset.path=$HOME/q.jsonl, which "
        "the shell expands)"
    )
    with pytest.raises(SystemExit):
        check_output_dir_argument(["env.action_texts=[a,b"], "jetgym-episode")
    assert "quote a value with special characters (env.action_texts='[a,b')" in capsys.readouterr().err


def test_which_errors_are_the_users():
    users = [
        ValueError("x"),
        FileNotFoundError("x"),
        FileExistsError("x"),
        PermissionError("x"),
        FolderInUseError("x"),
        LookupError("unknown agent"),
        OSError(errno.ENOSPC, "No space left on device"),
    ]
    bugs = [
        RuntimeError("x"),
        KeyError("x"),
        IndexError("x"),
        AttributeError("x"),
        TypeError("x"),
        OSError(errno.EIO, "I/O error"),
    ]
    assert all(is_user_error(e) for e in users) and not any(is_user_error(e) for e in bugs)
    error = ValueError("two\n  lines")
    error.add_note("a note")
    assert one_line(error) == "two lines; a note"


def test_an_episode_user_error_is_one_line_naming_env_action_texts(tmp_path):
    done = job(
        "episode",
        "env=taxi",
        "agent=random",
        "video=false",
        "env.action_texts=[north,south]",
        f"output_dir={tmp_path / 'out'}",
    )
    assert done.returncode == 2
    assert only_line(done) == (
        "jetgym-episode: 2 candidate texts for 6 actions: Taxi-v4 has 6 actions, so "
        "env.action_texts (texts= in Python) needs exactly 6 texts, one per action in order"
    )
    assert not (tmp_path / "out" / ".hydra").exists()


def test_repeated_action_texts_name_the_env():
    import gymnasium

    from jetgym.envs.candidates import action_texts

    env = gymnasium.make("FrozenLake-v1")
    with pytest.raises(ValueError) as caught:
        action_texts(env, 4, ["left", "down", "left", "up"])
    assert str(caught.value) == (
        "the 4 action texts of FrozenLake-v1 must be distinct, but 'left' is given 2 times in "
        "['left', 'down', 'left', 'up']: give each action its own text (env.action_texts, "
        "texts= in Python)"
    )


def test_a_libero_path_that_is_not_hdf5_is_named(tmp_path):
    from jetgym.envs.libero.questions import load_libero

    path = tmp_path / "demo.hdf5"
    path.write_text('{"question": "not hdf5"}\n')
    with pytest.raises(ValueError) as caught:
        load_libero(path=str(path))
    assert str(caught.value).startswith(f"{path}: not a readable HDF5 file (")
    assert str(caught.value).endswith(
        "a LIBERO set is a demonstrations .hdf5 file (or a folder of them): check dataset.path"
    )


@pytest.fixture(scope="module")
def embedded_folder():
    from jetgym.scorers.models import embedded_folder

    return embedded_folder("smollm2-135m-instruct")


def test_a_model_folder_without_a_tokenizer_is_named(tmp_path, embedded_folder):
    from jetgym.scorers.models import ModelNotFoundError, load_model

    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(embedded_folder / "config.json", folder)
    (folder / "model.safetensors").symlink_to(embedded_folder / "model.safetensors")
    with pytest.raises(ModelNotFoundError) as caught:
        load_model(str(folder))
    message = str(caught.value)
    assert message.startswith(f"model folder {folder} has no usable tokenizer (")
    assert message.endswith(
        "it holds no tokenizer files: save the tokenizer into it (tokenizer.save_pretrained(folder) "
        "writes tokenizer.json and tokenizer_config.json)"
    )


@pytest.mark.parametrize("keep", [100, 0.5], ids=["header", "half"])
def test_truncated_model_weights_are_named(tmp_path, embedded_folder, keep):
    from jetgym.scorers.models import ModelNotFoundError, load_model

    folder = tmp_path / "model"
    shutil.copytree(embedded_folder, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    data = (embedded_folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: keep if isinstance(keep, int) else int(len(data) * keep)])
    with pytest.raises(ModelNotFoundError) as caught:
        load_model(str(folder))
    assert str(caught.value).startswith(f"model weights {folder / 'model.safetensors'} cannot be read (")
    assert str(caught.value).endswith("bytes): the file is truncated or corrupt; copy or save it again")


@pytest.mark.parametrize("damage", ["weights", "config"])
def test_a_damaged_converted_embedded_model_says_delete_it_to_convert_again(
    tmp_path, monkeypatch, embedded_folder, damage
):
    """Issue 48, item 8: a cut converted model said "copy or save it again", a garbage config.json "Download it
    while online"; the embedded model is never downloaded, and deleting its converted copy converts it again."""
    from jetgym.scorers.models import ModelNotFoundError, load_model

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "jetgym" / "models" / "smollm2-135m-instruct"
    shutil.copytree(embedded_folder, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    if damage == "weights":
        (folder / "model.safetensors").write_bytes((embedded_folder / "model.safetensors").read_bytes()[:100])
    else:
        (folder / "model.safetensors").symlink_to(embedded_folder / "model.safetensors")
        (folder / "config.json").write_text("{ garbage")
    with pytest.raises(ModelNotFoundError) as caught:
        load_model("smollm2-135m-instruct")
    assert str(caught.value).endswith(
        f"it is jetgym's converted copy of the embedded model 'smollm2-135m-instruct': delete {folder} and rerun, "
        f"and jetgym converts it again from its cached wheel" + ("." if damage == "config" else "")
    )


def test_a_refused_episode_run_leaves_the_folders_hydra_record_as_it_was(tmp_path):
    out = tmp_path / "out"
    args = ["env=taxi", "agent=random", "video=false", "+env.kwargs.max_episode_steps=5", f"output_dir={out}"]
    first = job("episode", *args)
    assert first.returncode == 0, first.stderr
    record = hydra_files(out)
    assert b"agent=random" in record["overrides.yaml"]
    steps = (out / "steps.jsonl").read_bytes()
    again = job("episode", *args[:-1], "seed=7", f"output_dir={out}")
    assert again.returncode == 2
    assert only_line(again) == (
        f"jetgym-episode: {out} already holds episode results (steps.jsonl, episodes.jsonl, "
        f"timings.jsonl, summary.json, ... (5 files)); choose a new output_dir (nothing was "
        f"overwritten)"
    )
    assert hydra_files(out) == record and (out / "steps.jsonl").read_bytes() == steps


def test_a_swept_output_dir_is_left_to_hydra(tmp_path):
    check_output_dir_argument(["-m", f"output_dir={tmp_path / 'a'},{tmp_path / 'b'}"], "jetgym-qa")
    check_output_dir_argument(["output_dir=outputs/${now:%H}"], "jetgym-qa")  # interpolations too
    assert list(tmp_path.iterdir()) == []


def test_a_box_action_env_from_the_command_line_is_one_line_naming_env_discretize(tmp_path):
    done = job("episode", "env=gym", "env.id=MountainCarContinuous-v0", "agent=random", f"output_dir={tmp_path / 'a'}")
    assert done.returncode == 2
    assert only_line(done) == (
        "jetgym-episode: env.id=MountainCarContinuous-v0 has the action space Box(-1.0, 1.0, "
        "(1,), float32), which candidates cannot list: set env.discretize=N to split each of "
        "its dimensions into N actions (e.g. env.discretize=5)"
    )


def test_env_discretize_plays_a_box_action_env_with_the_given_texts(tmp_path):
    out = tmp_path / "out"
    done = job(
        "episode",
        "env=gym",
        "env.id=MountainCarContinuous-v0",
        "env.discretize=3",
        "agent=random",
        "env.action_texts=[push left,coast,push right]",
        "+env.kwargs.max_episode_steps=4",
        "video=false",
        f"output_dir={out}",
    )
    assert done.returncode == 0, done.stderr
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert len(steps) == 4 and {s["text"] for s in steps} <= {"push left", "coast", "push right"}


@pytest.mark.parametrize(
    "override, message",
    [
        ("env.discretize=1", "env.discretize must be null or a number of bins >= 2, got 1"),
        (
            "+env.kwargs.slipery=false",
            "env.kwargs: FrozenLake-v1 does not take 'slipery' (it takes render_mode, desc, "
            "map_name, is_slippery, success_rate, reward_schedule, max_episode_steps); "
            "remove it or fix its name",
        ),
    ],
)
def test_bad_env_settings_are_one_line(tmp_path, override, message):
    done = job("episode", "env=frozenlake", "agent=random", override, f"output_dir={tmp_path / 'a'}")
    assert done.returncode == 2 and only_line(done) == f"jetgym-episode: {message}"


def folder_bytes(folder: Path) -> dict:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != ".jetgym.lock"
    }


def test_a_job_refuses_a_folder_another_kind_of_job_wrote_naming_that_job(tmp_path):
    qa, episode, train = tmp_path / "qa", tmp_path / "episode", tmp_path / "train"
    assert job("qa", *qa_args(tmp_path, qa)).returncode == 0
    episode_args = ("env=taxi", "agent=random", "video=false", "+env.kwargs.max_episode_steps=3")
    assert job("episode", *episode_args, f"output_dir={episode}").returncode == 0
    train.mkdir()  # a training run under way: its log and checkpoint pointer
    (train / "train.jsonl").write_text('{"update": 1}\n')
    (train / "checkpoint.json").write_text('{"folder": "checkpoint-000001"}\n')
    qa_files = ", ".join(
        path.name
        for path in (qa / "responses.jsonl", qa / "run.json", qa / "runs.jsonl", qa / "reliability.png")
        if path.exists()
    )
    holds = {
        qa: f"QA results written by jetgym-qa ({qa_files})",
        episode: "episode results written by jetgym-episode (steps.jsonl, episodes.jsonl, timings.jsonl)",
        train: "a training run written by jetgym-train (train.jsonl, checkpoint.json)",
    }
    runs = {
        "qa": lambda out: qa_args(tmp_path, out),
        "episode": lambda out: (*episode_args, f"output_dir={out}"),
        "train": lambda out: (f"output_dir={out}",),
    }
    before = {folder: folder_bytes(folder) for folder in holds}
    for module, args in runs.items():
        for folder, what in holds.items():
            if folder.name == module:
                continue
            done = job(module, *args(folder))
            assert done.returncode == 2, done.stderr
            assert only_line(done) == (
                f"jetgym-{module}: {folder} holds {what}; jetgym-{module} does not write into "
                f"another job's folder: choose a new output_dir (nothing was overwritten)"
            )
    for folder, files in before.items():  # the job's own log and lock file aside, nothing was written
        assert {name: data for name, data in folder_bytes(folder).items() if name in files} == files


def test_a_qa_run_refuses_a_summary_without_its_run_record(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("{}\n")
    done = job("qa", *qa_args(tmp_path, out))
    assert done.returncode == 2
    assert only_line(done) == (
        f"jetgym-qa: {out} already holds results but no run.json (summary.json); choose a new "
        f"output_dir (nothing was overwritten)"
    )
    assert folder_bytes(out) == {"qa.log": b"", "summary.json": b"{}\n"}


def test_an_episode_with_a_gif_prints_no_display_complaint(tmp_path):
    out = tmp_path / "out"
    done = job(
        "episode",
        "env=taxi",
        "agent=random",
        "+env.kwargs.max_episode_steps=3",
        f"output_dir={out}",
        env={"XDG_RUNTIME_DIR": None, "SDL_VIDEODRIVER": None, "SDL_AUDIODRIVER": None},
    )
    assert done.returncode == 0, done.stderr
    assert (out / "episode_000.gif").stat().st_size > 0
    assert "XDG_RUNTIME_DIR" not in done.stderr and "ALSA" not in done.stderr and "error:" not in done.stderr


@pytest.mark.parametrize(
    "module, overrides, message",
    [
        ("episode", ["agent=random", "seed=-5"], "seed must be >= 0 (envs take non-negative seeds), got -5"),
        (
            "episode",
            ["agent=random", "env=gym", "env.id=broken_envs:BrokenNanReward-v0", "env.action_texts=[left,right]"],
            "BrokenNanReward-v0's step() at episode 0, step 2 returned reward = nan: a reward must be a finite "
            "number; fix the env's reward",
        ),
        (
            "episode",
            [
                "agent=fixed",
                "agent.control=right",
                "env=gym",
                "env.id=broken_envs:BrokenRaisingStep-v0",
                "env.action_texts=[left,right]",
            ],
            "BrokenRaisingStep-v0's step(1) at episode 0, step 2 raised KeyError: 'wall' (an error inside the env, "
            "not in jetgym; HYDRA_FULL_ERROR=1 shows its traceback)",
        ),
        pytest.param(
            "qa",
            ["placement=cuda", "scorer.name=jet"],
            "placement 'cuda' needs a CUDA GPU and torch sees none; use placement=cpu",
            marks=pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="the message when no GPU exists"),
        ),
    ],
)
def test_settings_that_failed_late_are_one_line(tmp_path, module, overrides, message):
    """Issue 48, items 7 and 6: each of these ended in a traceback (or, for NaN rewards in training, a nan mean
    return); an error inside the env read as jetgym's."""
    args = qa_args(tmp_path, tmp_path / "a", *overrides) if module == "qa" else (*overrides, f"output_dir={tmp_path}/a")
    done = job(module, *args, env={"PYTHONPATH": str(TESTS)})
    last = [line for line in done.stderr.splitlines() if line.strip()][-1].split("\r")[-1]  # after a progress bar
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert last.split("]")[-1] == f"jetgym-{module}: {message}"


@pytest.mark.parametrize(
    "job, after",
    [
        ("jetgym-qa", "rerun the same command to resume (the responses written are kept)"),
        ("jetgym-episode", "episode runs do not resume: rerun with a new output_dir to start over"),
    ],
)
def test_ctrl_c_is_one_line_saying_whether_a_rerun_resumes(monkeypatch, capsys, job, after):
    """Issue 48, item 9: Ctrl-C printed a 100+ line traceback and no word on resuming."""
    from jetgym.scripts.cli import user_errors

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as caught, user_errors(job):
        raise KeyboardInterrupt
    assert caught.value.code == 130 and capsys.readouterr().err == f"{job}: interrupted; {after}\n"
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(KeyboardInterrupt), user_errors(job):
        raise KeyboardInterrupt
