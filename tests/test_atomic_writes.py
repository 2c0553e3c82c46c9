"""Files a reader trusts are written whole or not at all (issue 27, item 2): plots, GIFs and reports go through
`jetgym.runs.folder.atomic_file`; a full disk is one line naming the file and the free space, and the folder
stays resumable. Tested with a fake writer everywhere and on a real small tmpfs where the machine lets the test
mount one."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jetgym.runs import folder as folder_
from jetgym.runs import qa as runner
from jetgym.runs.folder import DiskFullError, append_jsonl, atomic_file, write_json, write_text
from jetgym.runs.video import write_gif
from jetgym.scorers import make_scorer
from jetgym.scorers.types import Question

TESTS = Path(__file__).resolve().parent


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial" in p.name)


def test_a_full_disk_leaves_a_replaced_file_as_it_was_and_names_it(tmp_path, monkeypatch):
    target = write_json(tmp_path / "run.json", {"chunk_size": 16})
    before = target.read_bytes()
    monkeypatch.setattr(folder_.os, "fsync", no_space)
    with pytest.raises(DiskFullError) as caught:
        write_json(target, {"chunk_size": 16, "more": "x" * 100})
    assert str(caught.value).startswith(f"no space left to write {target} (")
    assert str(caught.value).endswith(
        "bytes free); the file was left as it was. Free some space (or choose another output_dir) and run again"
    )
    assert caught.value.errno == errno.ENOSPC and caught.value.__cause__ is None
    assert target.read_bytes() == before and leftovers(tmp_path) == []


def test_a_full_disk_while_writing_names_the_space_needed(tmp_path, monkeypatch):
    monkeypatch.setattr(Path, "write_bytes", no_space)
    with pytest.raises(
        DiskFullError,
        match=r"no space left to write .*report.md \([\d,]+ bytes free, about 1,000 "
        r"needed\); the file was left as it was",
    ):
        write_text(tmp_path / "report.md", "x" * 1000)
    assert not (tmp_path / "report.md").exists() and leftovers(tmp_path) == []


def test_a_full_disk_while_appending_says_the_next_run_resumes(tmp_path, monkeypatch):
    monkeypatch.setattr(folder_.os, "fsync", no_space)
    with pytest.raises(
        DiskFullError,
        match=r"no space left to write .*responses.jsonl \(.*\); its last line may be "
        r"torn: the next run cuts it off and resumes",
    ):
        append_jsonl(tmp_path / "responses.jsonl", [{"id": "q0"}])


def test_a_corrupt_run_json_is_named(tmp_path, fake_scorer):
    (tmp_path / "run.json").write_text("")
    with pytest.raises(
        ValueError,
        match=rf"^{tmp_path / 'run.json'} is not valid JSON \(Expecting value; 0 bytes\): "
        rf"the settings of the run in {tmp_path} cannot be read; restore the file or "
        rf"use a fresh output_dir$",
    ):
        runner.run_qa(
            [Question(context="q", candidates=["a", "b"], id="q0")], make_scorer("fake"), tmp_path, quiet=True
        )


def test_a_gif_interrupted_while_written_leaves_no_gif(tmp_path, monkeypatch):
    from PIL import Image

    frames = [np.full((8, 8, 3), 80 * k, np.uint8) for k in range(3)]

    def torn_save(self, target, *args, **kwargs):
        Path(target).write_bytes(b"GIF89a")  # a part of the file, then the process is stopped
        raise KeyboardInterrupt

    monkeypatch.setattr(Image.Image, "save", torn_save)
    with pytest.raises(KeyboardInterrupt):
        write_gif(frames, tmp_path / "episode_000.gif", fps=10)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    path = write_gif(frames, tmp_path / "episode_000.gif", fps=10)
    assert Image.open(path).n_frames == 3 and leftovers(tmp_path) == []


def test_the_reliability_diagram_is_replaced_whole(tmp_path, fake_scorer, monkeypatch):
    from jetgym.questions import metrics

    questions = [Question(context=f"q{k}", candidates=["a", "b"], gold=k % 2, id=f"q{k}") for k in range(4)]
    runner.run_qa(questions, make_scorer("fake"), tmp_path, quiet=True)
    before = (tmp_path / "reliability.png").read_bytes()
    assert before.startswith(b"\x89PNG")
    assert json.loads((tmp_path / "summary.json").read_text())["calibration"]["diagram"] == "reliability.png"

    def torn_plot(curves, path, title="Reliability"):
        Path(path).write_bytes(b"\x89PNG")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(metrics, "plot_reliability", torn_plot)
    (tmp_path / "summary.json").unlink()  # the rerun writes its summary and report again
    with pytest.raises(DiskFullError, match=r"no space left to write .*reliability.png"):
        runner.run_qa(questions, make_scorer("fake"), tmp_path, quiet=True)
    assert (tmp_path / "reliability.png").read_bytes() == before and leftovers(tmp_path) == []


def test_atomic_file_keeps_the_suffix_for_writers_that_read_it(tmp_path):
    with atomic_file(tmp_path / "chart.png") as partial:
        assert partial.parent == tmp_path and partial.suffix == ".png" and partial.name.startswith(".chart.png.")
        partial.write_bytes(b"x")
    assert (tmp_path / "chart.png").read_bytes() == b"x"
    assert oct((tmp_path / "chart.png").stat().st_mode & 0o777) == oct(folder_.FILE_MODE)


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (root on Linux only; skipped elsewhere)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_ends_jetgym_qa_with_one_line_and_the_folder_resumes(tmp_path, small_disk):
    data = tmp_path / "q.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": f"What is {k} + {k}? " + "x" * 400, "choices": [str(2 * k), str(k)], "answer": 0})
            + "\n"
            for k in range(1, 41)
        )
    )
    out = small_disk / "out"
    filler = small_disk / "filler"
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r}); import conftest\n"
        "from jetgym.scripts.qa import main\nsys.argv = ['jetgym-qa', *sys.argv[1:]]\nmain()\n"
    )
    command = [
        sys.executable,
        "-c",
        code,
        f"output_dir={out}",
        "scorer.name=fake",
        "dataset=jsonl",
        f"dataset.path={data}",
        "chunk_size=4",
        "hydra/job_logging=disabled",
        "hydra/hydra_logging=disabled",
    ]
    free = shutil.disk_usage(small_disk).free
    filler.write_bytes(b"\0" * (free - 12 * 1024))  # room for run.json, .hydra/ and a few chunks
    stopped = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, "HYDRA_FULL_ERROR": "0"}
    )
    assert stopped.returncode == 2, stopped.stderr
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith(f"jetgym-qa: no space left to write {out}/") and "bytes free" in last
    assert "Traceback" not in stopped.stderr
    filler.unlink()
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    rows = [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines()]
    assert [row["id"] for row in rows] == [f"q-{k}" for k in range(40)]
    assert json.loads((out / "summary.json").read_text())["requests"] == 40
