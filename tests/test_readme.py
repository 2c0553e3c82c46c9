"""The README's examples run as written: its Python blocks execute, its command lines compose and validate."""

from __future__ import annotations

import importlib
import itertools
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jetgym.scripts.config import compose, to_config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]  # docs/benchmarks.md quotes past commands: not examples
EXAMPLES = [page for page in PAGES if page.name != "benchmarks.md"]
# a command's job -> (config name, module that stores its schema)
JOBS = {
    "qa": ("qa", "jetgym.scripts.qa"),
    "episode": ("episode", "jetgym.scripts.episode"),
    "train": ("train", "jetgym.scripts.train"),
    "eval": ("eval", "jetgym.scripts.evaluate"),
    "calibrate": ("calibrate", "jetgym.scripts.calibrate"),
    "benchmarks.scoring": ("bench", "benchmarks.scoring"),
    "benchmarks.fastjev": ("bench_fastjev", "benchmarks.fastjev"),
    "benchmarks.dtype": ("bench_dtype", "benchmarks.dtype"),
}


def blocks(language: str, pages=(README,)) -> list[str]:
    found = (b for page in pages for b in re.findall(rf"```{language}\n(.*?)```", page.read_text(), re.S))
    return [textwrap.dedent(b) for b in found]  # a block inside a list item is indented


def job_of(words: list[str]) -> tuple[str | None, list[str]]:
    """(job, its arguments) of a command line: `jetgym JOB ...`, `jetgym-JOB ...` or `python -m benchmarks.X ...`."""
    program = Path(words[0]).name
    if program == "jetgym" and len(words) > 1:
        return words[1], words[2:]
    if program.startswith("jetgym-"):
        return program.removeprefix("jetgym-"), words[1:]
    if program.startswith("python") and words[1:2] == ["-m"] and len(words) > 2:
        return words[2], words[3:]
    return None, []


def commands() -> list[list[str]]:
    found = []
    for block in blocks("bash", EXAMPLES):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words and job_of(words)[0] in JOBS:
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
    name, args = job_of(words)
    job, module = JOBS[name]
    importlib.import_module(module)  # stores the job's schema
    overrides = [w for w in args if w != "-m"]
    sweeps = [
        [f"{o.split('=')[0]}={v}" for v in o.split("=", 1)[1].split(",")] if "-m" in args and "," in o else [o]
        for o in overrides
    ]  # a sweep's jobs: each value of a comma list
    for choice in itertools.product(*sweeps):
        assert to_config(compose(job, list(choice))) is not None


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(b, marks=pytest.mark.slow) if "make_scorer(" in b or "JetgymLM(" in b else b
        for b in blocks("python", EXAMPLES)
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
