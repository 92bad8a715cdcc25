"""The package's import graph has no cycles, and every module imports on its own, in any order.

The graph is read with `ast` from every import statement, including those inside functions, so a
late import cannot hide a cycle. llmserve/triton_models/ is not part of the package: those files are
model.py sources copied into the repository and import triton_python_backend_utils."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "llmserve"


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {
        module_name(p): p
        for p in sorted(PKG.rglob("*.py"))
        if "triton_models" not in p.parts and "__pycache__" not in p.parts
    }


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package that `name` imports (and the packages whose __init__ that runs)."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[: len(here) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            parts = t.split(".")
            # importing a.b.c runs a.b's __init__ too, unless that package is the importer's own
            for i in range(2, len(parts) + 1):
                mod = ".".join(parts[:i])
                if mod in known and mod != name and not name.startswith(mod + "."):
                    found.add(mod)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str):
        state[n] = 1
        path.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return path[path.index(m) :] + [m]
            if m not in state and (cycle := visit(m)):
                return cycle
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (cycle := visit(n)):
            return cycle
    return None


def test_find_cycle_detects_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_package_import_graph_has_no_cycles():
    mods = package_modules()
    graph = {n: imports_of(n, p, set(mods)) for n, p in mods.items()}
    assert sum(len(v) for v in graph.values()) > 50, "the graph reader found too few imports"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("order", ["sorted", "reversed"])
def test_every_module_imports_in_any_order(order):
    names = sorted(package_modules())
    if order == "reversed":
        names.reverse()
    code = "import importlib\nfor n in %r:\n    importlib.import_module(n)\n" % names
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


# docs/architecture.md's rows, top to bottom: a module may import its own row and the rows below.
LAYERS = [
    {"cli", "deploy", "openai_api", "bench"},
    {"client"},
    {"repository"},
    {"pipeline"},
    {"trtllm"},
    {"engine", "request", "text"},
    {"spec", "contract", "errors", "finish", "logs", "pbtxt", "checkpoint"},
]


def layer_of(module: str) -> int:
    """Row of `llmserve.<folder or top-level module>...`."""
    top = module.split(".")[1]
    rows = [i for i, row in enumerate(LAYERS) if top in row]
    assert rows, f"{module}: its folder is in no row of LAYERS (add it here and to docs/architecture.md)"
    return rows[0]


def test_imports_run_down_the_layers():
    mods = package_modules()
    climbs = [
        f"{n} -> {t}"
        for n, p in mods.items()
        if n != "llmserve"
        for t in sorted(imports_of(n, p, set(mods)))
        if t != "llmserve" and layer_of(t) < layer_of(n)
    ]
    assert not climbs, "imports that climb a row of docs/architecture.md:\n" + "\n".join(climbs)
