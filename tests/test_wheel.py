"""An installed wheel works as well as the checkout: build it, install it into a fresh virtual environment
(no editable install, cwd outside the repository), run the two console jobs, and check that they write
only into their output folders."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(ROOT), "-w", str(out)],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("jetgym-*.whl")
    return path


def test_wheel_holds_configs_and_calibration(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "jetgym/conf/qa.yaml",
        "jetgym/conf/episode.yaml",
        "jetgym/conf/scorer/jet.yaml",
        "jetgym/scorers/fastjev/calibrations/smollm2-135m-instruct.json",
        "jetgym/__init__.py",
        "jetgym/py.typed",
        "jetgym/runs/folder.py",
        "jetgym/runs/qa.py",
        "jetgym/runs/episodes.py",
    } <= names
    assert not [
        n for n in names if n.split("/")[0] in ("agents", "envs", "scorers", "runs", "scripts", "conf", "tests")
    ]


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed; the other dependencies come from this interpreter's
    site-packages through a .pth path entry (which does not run the checkout's editable-install hook)."""
    env = tmp_path_factory.mktemp("venv")
    venv.create(env, with_pip=False)
    site = next((env / "lib").glob("python*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(env / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    return env


def run(installed: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    return subprocess.run(
        [str(installed / "bin" / args[0]), *args[1:]], cwd=cwd, env=environ, capture_output=True, text=True, timeout=600
    )


def test_installed_package_is_not_the_checkout(installed, tmp_path):
    code = "import jetgym.scorers, jetgym.conf; print(jetgym.scorers.__file__)"
    out = subprocess.run(
        [str(installed / "bin" / "python"), "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert str(installed) in out.stdout and str(ROOT) not in out.stdout


@pytest.mark.slow
def test_installed_console_jobs_write_only_their_output_dirs(installed, tmp_path):
    pytest.importorskip("vizdoom")
    site = next((installed / "lib").glob("python*/site-packages"))
    before_site, before_cwd = files_under(site), files_under(tmp_path)
    qa = run(installed, tmp_path, "jetgym-qa", "dataset.limit=2", f"output_dir={tmp_path / 'qa'}")
    assert qa.returncode == 0, qa.stderr[-3000:]
    assert {"responses.jsonl", "summary.json", "report.md", "run.json"} <= set(os.listdir(tmp_path / "qa"))
    episode = run(
        installed,
        tmp_path,
        "jetgym-episode",
        "agent=random",
        "env.kwargs.episode_timeout=20",
        f"output_dir={tmp_path / 'episode'}",
    )
    assert episode.returncode == 0, episode.stderr[-3000:]
    assert {"steps.jsonl", "episodes.jsonl", "summary.json", "episode_000.gif"} <= set(os.listdir(tmp_path / "episode"))
    new = {p for p in files_under(tmp_path) - before_cwd if not p.startswith(("qa", "episode"))}
    assert not new, new
    assert files_under(site) == before_site
