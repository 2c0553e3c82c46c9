"""The import graph as docs/architecture.md states it: packages import only lower layers, modules never in a circle.

Every import counts, at the top of a module or deferred inside a function (a deferred import is still a
dependency). Read from the source with `ast`, so nothing is imported here."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# lower layers first; a package may import only packages of a lower layer (the top package re-exports lazily)
LAYERS = {
    "jetgym.scorers": 0,
    "jetgym.questions": 1,
    "jetgym.envs": 2,
    "jetgym.agents": 3,
    "jetgym.runs": 4,
    "jetgym.training": 5,
    "jetgym.integrations": 5,
    "jetgym.scripts": 6,
    "jetgym": 7,
}


def modules() -> dict[str, Path]:
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    found = {}
    for package, folder in mapping.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    package = name if path.stem == "__init__" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known.keys()
            found.update(submodules or {base})
    return {module for module in found if module in known and module != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def package_of(module: str) -> str:
    return next(p for p in sorted(LAYERS, key=len, reverse=True) if module == p or module.startswith(p + "."))


def package_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {package: set() for package in LAYERS}
    for module, targets in graph().items():
        if module.startswith("jetgym.conf"):
            continue
        for target in targets:
            if package_of(target) != package_of(module):
                edges[package_of(module)].add(package_of(target))
    return edges


def test_every_package_has_a_layer():
    packages = {package_of(m) for m in modules() if not m.startswith("jetgym.conf")}
    assert packages == set(LAYERS)


def test_imports_point_down_only():
    upward = [
        f"{package} imports {target}"
        for package, targets in package_graph().items()
        for target in targets
        if LAYERS[target] >= LAYERS[package]
    ]
    assert upward == []


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle (as a path that returns to its start), found by depth-first search."""
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                found.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def test_no_module_imports_in_a_circle():
    edges = {m: {t for t in ts if not (m.startswith(t + ".") and t == package_of(m))} for m, ts in graph().items()}
    assert cycles(edges) == []


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_architecture_doc_lists_the_imports_as_they_are():
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = re.search(r"<!-- imports -->\n(.*?)<!-- end imports -->", text, re.S)
    assert table, "docs/architecture.md lacks its imports table"
    documented, listed = {}, {}
    for line in table.group(1).splitlines()[2:]:
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        documented[cells[0]] = set() if cells[2] == "-" else {c.strip().strip("`") for c in cells[2].split(",")}
        listed[cells[0]] = set() if cells[3] == "-" else {c.strip() for c in cells[3].split(",")}
    assert documented == package_graph()
    actual = {
        package: {
            m[len(package) + 1 :]
            for m in modules()
            if package_of(m) == package and m != package and not m.startswith("jetgym.conf")
        }
        for package in LAYERS
    }
    assert listed == actual
    for package, layer in LAYERS.items():
        assert f"| `{package}` | {layer} |" in table.group(1)


def test_every_benchmark_has_a_console_script():
    """Each `scripts/bench_*.py` is started by a `jetgym-bench-*` command whose target is its `main`."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    targets = {target: command for command, target in scripts.items()}
    for path in sorted((ROOT / "scripts").glob("bench_*.py")):
        target = f"jetgym.scripts.{path.stem}:main"
        assert target in targets, f"{path.name} has no console script: add `jetgym-{path.stem.replace('_', '-')}`"
        assert targets[target] == f"jetgym-{path.stem.replace('_', '-')}"
        tree = ast.parse(path.read_text())
        assert any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body), path.name
