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


def test_the_product_installs_one_front_door_and_no_benchmark():
    """`jetgym` and the job aliases are the installed commands; the benchmarks stay in the checkout's benchmarks/,
    which the wheel does not ship, and each runs as `python -m benchmarks.<name>`."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["jetgym"] == "jetgym.scripts.main:main"
    assert not [name for name in scripts if "bench" in name]
    assert not [target for target in scripts.values() if not target.startswith("jetgym.scripts.")]
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert not [p for p in packages if "bench" in p]
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        tree = ast.parse(path.read_text())
        if path.stem not in ("__init__", "doc", "flops"):
            assert any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body), path.name
            assert '__name__ == "__main__"' in path.read_text(), path.name
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    listed = {path.stem for path in (ROOT / "benchmarks").glob("*.py")} - {"__init__", "doc", "flops"}
    assert not [name for name in listed if f"python -m benchmarks.{name}" not in readme]


def test_scripts_stay_a_thin_layer():
    """The jobs and their composition root are at most 12% of the package's lines."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    lines = {
        folder: sum(len(p.read_text().splitlines()) for p in (ROOT / folder).glob("*.py"))
        for folder in mapping.values()
    }
    assert lines["scripts"] <= 0.12 * sum(lines.values()), lines
