"""The README's examples run as written: its Python blocks execute, its command lines compose and validate."""

from __future__ import annotations

import importlib
import itertools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from jetgym.scripts.config import compose, to_config

README = Path(__file__).resolve().parents[1] / "README.md"
JOBS = {
    "jetgym-qa": ("qa", "jetgym.scripts.qa"),
    "jetgym-episode": ("episode", "jetgym.scripts.episode"),
    "jetgym-bench": ("bench", "jetgym.scripts.bench"),
    "jetgym-calibrate": ("calibrate", "jetgym.scripts.calibrate"),
    "jetgym-bench-fastjev": ("bench_fastjev", "jetgym.scripts.bench_fastjev"),
    "jetgym-bench-dtype": ("bench_dtype", "jetgym.scripts.bench_dtype"),
    "jetgym-train": ("train", "jetgym.scripts.train"),
}


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), re.S)


def commands() -> list[list[str]]:
    found = []
    for block in blocks("bash"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words and Path(words[0]).name in JOBS:
                found.append(words)
    return found


def test_readme_starts_with_the_two_commands():
    first = blocks("bash")[0].splitlines()
    assert [line.split("#")[0].strip() for line in first] == ["make demo", "make test"]
    makefile = (README.parent / "Makefile").read_text()
    assert "\ndemo:" in makefile and "\ntest:" in makefile
    assert "make test" in (README.parent / ".ci" / "run").read_text()


@pytest.mark.parametrize("words", commands(), ids=lambda w: " ".join(w[:3]))
def test_readme_command_lines_compose(words):
    job, module = JOBS[Path(words[0]).name]
    importlib.import_module(module)  # stores the job's schema
    overrides = [w for w in words[1:] if w != "-m"]
    sweeps = [
        [f"{o.split('=')[0]}={v}" for v in o.split("=", 1)[1].split(",")] if "-m" in words and "," in o else [o]
        for o in overrides
    ]  # a sweep's jobs: each value of a comma list
    for choice in itertools.product(*sweeps):
        assert to_config(compose(job, list(choice))) is not None


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(b, marks=pytest.mark.slow) if "make_scorer(" in b or "JetgymLM(" in b else b
        for b in blocks("python")
    ],
    ids=lambda b: b.splitlines()[0][:40],
)
def test_readme_python_blocks_run(code, tmp_path):
    pytest.importorskip("gymnasium")
    if "vizdoom" not in sys.modules and "Doom" in code:
        pytest.importorskip("vizdoom")
    if "lm_eval" in code:
        pytest.importorskip("lm_eval", reason="the lm-eval extra is not installed")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
