"""The layout of the package, as CONTRIBUTING.md maps it: small modules, no import circle, and
each engine in its own room of ``wmobs/policy/`` that only the switch reaches."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "wmobs"
ROOMS = ("wmobs.policy._jvm", "wmobs.policy._python")
SWITCH = "wmobs.policy._engine"
FACES = ("wmobs.policy", "wmobs.policy.deadletter")
"""The public faces of the policy half: they re-export names from anywhere below them."""
LONGEST = 450


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The wmobs modules ``name`` imports when it runs (at its top or in a function; not under
    ``TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" for alias in node.names]
        found |= {m for t in targets if (m := _module_of(t, modules)) and m != name}
    return found


def _module_of(target: str, modules: dict[str, Path]) -> str | None:
    """The wmobs module an import names (``from a.b import c``: ``a.b.c`` where that is a
    module, else ``a.b``)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target if target.startswith("wmobs") else None


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _room(name: str) -> str | None:
    return next((r for r in ROOMS if name == r or name.startswith(f"{r}.")), None)


def test_no_module_of_wmobs_is_over_450_lines() -> None:
    long = {
        name: lines
        for name, path in _modules().items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > LONGEST
    }
    assert not long


def test_no_source_file_of_the_extension_is_over_450_lines() -> None:
    sources = Path(__file__).resolve().parents[2] / "jvm" / "src" / "main"
    long = {
        str(path.relative_to(sources)): lines
        for path in sources.rglob("*.java")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > LONGEST
    }
    assert not long


def test_the_imports_of_wmobs_have_no_circle() -> None:
    """Leaving aside a module's import of a package above it (Python has run that first)."""
    graph = _graph()
    for name, imported in graph.items():
        graph[name] = {m for m in imported if not name.startswith(f"{m}.")}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError(" -> ".join([*path[path.index(name) :], name]))
        if name in done:
            return
        for imported in sorted(graph[name]):
            visit(imported, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_only_the_switch_reaches_an_engine_room_and_no_room_reaches_up() -> None:
    """The plan asks the engine for its stages (``ctx.engine.<stage>``): no engine-neutral
    module imports a room but the switch (and the public faces, for the names they export);
    a room imports engine-neutral modules, never the other room, the switch, the faces or
    the modules that plan."""
    above = {SWITCH, *FACES, "wmobs.policy._time_policy", "wmobs.policy._plan"}
    wrong = []
    for name, imported in _graph().items():
        for target in imported:
            room, target_room = _room(name), _room(target)
            if target_room and room != target_room and name not in {SWITCH, *FACES}:
                wrong.append((name, target))
            if room and target in above:
                wrong.append((name, target))
    assert not wrong


def test_importing_wmobs_imports_no_pyspark() -> None:
    code = "import sys, wmobs, wmobs.policy.deadletter; print('pyspark' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=PACKAGE.parent,
    )
    assert out.stdout.strip() == "False"
