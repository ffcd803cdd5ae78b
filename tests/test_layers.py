"""The layers (docs/architecture.md, "Boundaries"): pacer's core imports nothing of gpu (the
device code comes in by name, as any workload does), and gpu imports pacer only in the adapter
that implements its contract; the service imports neither its API nor its server; the
controller is pure; only the PostgreSQL journal imports psycopg."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETTLE = ROOT / "pacer" / "settle"
"""`pacer settle` cleans up after the GPU pool (its /dev/shm blocks, named by gpu.shm.blocks) and
the synthesis processes (named by gpu.procs.lifeline): it reads their names from where they are
made."""
ADAPTER = ROOT / "gpu" / "workload"
PURE = [ROOT / "pacer" / "control", ROOT / "pacer" / "settle" / "detector.py"]
"""The controller and its parts: plain code on an injected clock, which the simulator and the
service drive alike."""
EDGES = ["asyncio", "threading", "aiohttp", "prometheus_client", "numpy"]


def imports(path: Path) -> set[str]:
    """The absolute modules ``path`` imports (``from a.b import c`` gives a.b and a.b.c)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def within(package: str, modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m == package or m.startswith(package + "."))


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(
    "path",
    [p for p in sources("pacer") if SETTLE not in p.parents],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_core_module_imports_gpu(path: Path) -> None:
    assert within("gpu", imports(path)) == []


@pytest.mark.parametrize(
    "path",
    [p for p in sources("gpu") if ADAPTER not in p.parents],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_gpu_imports_pacer_only_in_its_workload_adapter(path: Path) -> None:
    assert within("pacer", imports(path)) == []


@pytest.mark.parametrize("path", sources("pacer/service"), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_service_imports_neither_the_api_nor_the_server_around_it(path: Path) -> None:
    found = imports(path)
    assert within("pacer.api", found) + within("pacer.server", found) == []


@pytest.mark.parametrize(
    "path",
    [p for where in PURE for p in (sorted(where.rglob("*.py")) if where.is_dir() else [where])],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_the_controller_and_its_parts_import_no_loop_thread_metric_or_array(path: Path) -> None:
    found = imports(path)
    assert [m for edge in EDGES for m in within(edge, found)] == []


def test_the_baselines_import_only_the_policy_seam_of_pacer() -> None:
    found = imports(ROOT / "pacer" / "control" / "baselines.py")
    assert {m for m in within("pacer", found) if m.count(".") >= 2} <= {
        "pacer.control.policy",
        *(f"pacer.control.policy.{n}" for n in dir_names("policy")),
    }


def dir_names(module: str) -> set[str]:
    """The public names ``pacer.control.<module>`` defines at its top level."""
    tree = ast.parse((ROOT / "pacer" / "control" / f"{module}.py").read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


@pytest.mark.parametrize("path", sources("pacer"), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_postgresql_journal_imports_psycopg_and_only_the_factory_imports_it(
    path: Path,
) -> None:
    found = imports(path)
    inside = ROOT / "pacer" / "pgjournal" in path.parents
    if not inside:
        assert within("psycopg", found) + within("psycopg_pool", found) == []
    if not inside and path != ROOT / "pacer" / "journal" / "factory.py":
        assert within("pacer.pgjournal", found) == []


def test_the_check_sees_imports_of_every_form(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text(
        "import gpu.reference.ntt\nfrom gpu import pool\nif True:\n    from gpu.worker import x\n"
        "from . import sibling\nimport numpy as np\n"
    )
    assert within("gpu", imports(source)) == [
        "gpu", "gpu.pool", "gpu.reference.ntt", "gpu.worker", "gpu.worker.x"
    ]  # fmt: skip


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of pacer and gpu → the modules of pacer and gpu it imports, anywhere in it
    (in a function, or only for type checking, too)."""
    paths = sources("pacer") + sources("gpu")
    known = {module_name(p) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        targets = set()
        for name in imports(path):
            # ``from a.b import c`` names a.b and a.b.c: the module is the longest known one.
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                targets.add(name)
        # ``from a import b`` names a (its package) only on the way to a.b.
        targets = {t for t in targets if not any(u.startswith(t + ".") for u in targets)}
        graph[module_name(path)] = targets - {module_name(path)}
    return graph


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = import_graph()
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def walk(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                walk(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])
    assert circles == []


def test_the_tree_is_packages_with_few_modules_at_each_root() -> None:
    def root_modules(package: str) -> list[str]:
        return sorted(p.name for p in (ROOT / package).glob("*.py") if p.name != "__init__.py")

    assert len(root_modules("pacer")) <= 12, root_modules("pacer")
    assert len(root_modules("gpu")) <= 8, root_modules("gpu")


def test_no_module_name_is_used_more_than_twice() -> None:
    names: dict[str, list[str]] = {}
    for path in sources("pacer") + sources("gpu"):
        if path.name != "__init__.py":
            names.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    assert {n: where for n, where in names.items() if len(where) > 2} == {}


@pytest.mark.parametrize(
    "path", sources("pacer") + sources("gpu"), ids=lambda p: str(p.relative_to(ROOT))
)
def test_no_module_is_over_400_lines(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 400
