"""The package's imports run one way, down its layers (LAYERS, docs/architecture.md), and so form no cycle:
every `import` of rmsnorm_repro by rmsnorm_repro, those inside functions (lazy imports) included, read
from the source with ast.

`from package import name` is an edge to the submodule package.name when there is one, else to the
package. A module's own parent packages are not edges: Python runs them first, by design.
"""
import ast
from pathlib import Path

import rmsnorm_repro

ROOT = Path(rmsnorm_repro.__file__).parent
PACKAGE = ROOT.name
# Bottom to top. A module imports its own package (unit) and units of lower layers only; units of one layer
# do not import each other. The leaves import nothing of the package but the leaves listed before them.
LAYERS = [
    ["atomic", "errors", "host", "allocator"],   # leaves: atomic writes, the one bad-input error, the machine
    ["redact", "wandb_access"],                  # leaves: secrets kept out of records; whether wandb can log
    ["record"],                                  # what a run's files are: names, summary, metrics
    ["paths"],                                   # where configs and the paper's numbers are; config resolvers
    ["norms"],                                   # the normalizations (and Table 1, computed from them)
    ["nn"],                                      # layers built on them
    ["tasks"],                                   # data, models, metrics of the paper's tasks
    ["runner", "report"],                        # trains one run / reads run folders: neither imports the other
    ["cli_errors"],                              # the command line's errors as one line each
    ["bench", "launchers"],                      # speed tables; Hydra launchers and the sweep callback (its
                                                 # compare page)
    ["train", "plan"],                           # the command line (a failed sweep's end table: launchers);
                                                 # make plan
    ["campaigns"],                               # train sweeps, then report: make demo, make small
]


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


def unit(module: str) -> str:
    """The layer unit of a module: its top-level module or subpackage under rmsnorm_repro."""
    return module.split(".")[1] if "." in module else module


def upward_imports(graph: dict[str, set[str]], layers: list[list[str]]) -> list[str]:
    """Each import of a unit at the same or a higher layer than the importer's, as "a -> b"."""
    level = {name: i for i, layer in enumerate(layers) for name in layer}
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if a != PACKAGE and unit(a) != unit(b) and level[unit(b)] >= level[unit(a)])


def test_every_module_has_a_layer():
    named = [name for layer in LAYERS for name in layer]
    assert len(named) == len(set(named))
    assert {unit(m) for m in import_graph() if m != PACKAGE} == set(named)


def test_imports_go_down_the_layers():
    """record.py (the runs' contract) needs no runner; report/ reads runs through record.py and the leaves,
    never the runner; the runner loads no reporting."""
    assert upward_imports(import_graph(), LAYERS) == []


def test_the_layer_check_reports_an_upward_and_a_sideways_import():
    graph = {f"{PACKAGE}.record": {f"{PACKAGE}.runner.config"}, f"{PACKAGE}.runner.config": {f"{PACKAGE}.atomic"},
             f"{PACKAGE}.report.tables": {f"{PACKAGE}.bench.tables", f"{PACKAGE}.report.aggregate"}}
    layers = [["atomic"], ["record"], ["runner"], ["bench", "report"]]
    assert upward_imports(graph, layers) == [f"{PACKAGE}.record -> {PACKAGE}.runner.config",
                                             f"{PACKAGE}.report.tables -> {PACKAGE}.bench.tables"]


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
