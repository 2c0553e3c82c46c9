"""Build `build/typecheck/jetgym/`: links to the folders of pyproject's package-dir mapping, so static checkers
(mypy, pyright) resolve `jetgym.<name>` from a checkout (the editable install maps them with an import hook,
which static tools cannot see). Links follow edits and new files; rerun only when the mapping changes."""

import shutil
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "typecheck"

mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
shutil.rmtree(TREE, ignore_errors=True)
for package, folder in sorted(mapping.items()):
    target = TREE.joinpath(*package.split("."))
    target.parent.mkdir(parents=True, exist_ok=True)
    if package == "jetgym":  # its own files; the subpackages are links beside them
        target.mkdir(exist_ok=True)
        for path in (ROOT / folder).iterdir():
            if path.name != "__pycache__":
                (target / path.name).symlink_to(path)
    elif not target.exists():
        target.symlink_to(ROOT / folder, target_is_directory=True)
print(f"{TREE}: {', '.join(sorted(mapping))}")
