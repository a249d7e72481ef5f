"""The package's imports form no cycle: every `import` of rmsnorm_repro by rmsnorm_repro, those inside
functions (lazy imports) included, read from the source with ast.

`from package import name` is an edge to the submodule package.name when there is one, else to the
package. A module's own parent packages are not edges: Python runs them first, by design.
"""
import ast
from pathlib import Path

import rmsnorm_repro

ROOT = Path(rmsnorm_repro.__file__).parent
PACKAGE = ROOT.name


def module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    paths = {module_name(p): p for p in ROOT.rglob("*.py")}

    def known(name: str) -> str | None:  # the longest prefix of a dotted name that is a module here
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    base = ".".join(filter(None, (base, node.module)))
                else:
                    base = node.module or ""
                targets.update(known(f"{base}.{alias.name}") for alias in node.names)
        graph[name] = targets - {None, name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "rmsnorm_repro.norms.fused" in graph["rmsnorm_repro.norms.functional"]  # the graph sees imports
    assert cycles(graph) == []


def test_the_norm_formulas_are_a_leaf():
    """fused/ falls back to the formulas and functional wraps both: the formulas need neither."""
    graph = import_graph()
    assert graph["rmsnorm_repro.norms.formulas"] == set()
    assert "rmsnorm_repro.norms.formulas" in graph["rmsnorm_repro.norms.fused"]


def test_the_check_sees_lazy_imports_and_reports_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert "rmsnorm_repro.norms.fused.triton_rmsnorm" in import_graph()["rmsnorm_repro.norms.fused"]  # inside _triton()
