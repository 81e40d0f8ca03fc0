"""The package's imports point one way: no module of flashtutor imports (at its top or inside a function) a
module that imports it back, directly or through others. The grader's judge and its timed phase, the loaders
and the emulation, api and the emulation were circles once; process-wide switches live in a leaf module
(flashtutor/switches.py) that the levels read without importing one another."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "flashtutor"


def _graph() -> dict[str, set[str]]:
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = p
    graph = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m.split(".") if p.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(p.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs + ([base] if len(subs) < len(node.names) else [])
            graph[m] |= {t for t in targets if t in mods and t != m}
    return graph


def _cycles(graph) -> list[list[str]]:
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_checker_finds_a_cycle():
    g = _graph()
    g["flashtutor.switches"] = g["flashtutor.switches"] | {"flashtutor.emulate"}   # the circle it broke
    assert any("flashtutor.switches" in c for c in _cycles(g))
