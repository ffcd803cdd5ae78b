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
"""`pacer settle` cleans up after the GPU pool (its /dev/shm blocks, named by gpu.shm_blocks) and
the synthesis processes (named by gpu.lifeline): it reads their names from where they are made."""
ADAPTER = ROOT / "gpu" / "workload"
PURE = ["policy", "controller", "pi_law", "rate_dispatch", "bootstrap", "estimates", "windows",
        "cohort", "baselines", "settle/detector"]  # fmt: skip
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


@pytest.mark.parametrize("module", PURE)
def test_the_controller_and_its_parts_import_no_loop_thread_metric_or_array(module: str) -> None:
    found = imports(ROOT / "pacer" / f"{module}.py")
    assert [m for edge in EDGES for m in within(edge, found)] == []


def test_the_baselines_import_only_the_policy_seam_of_pacer() -> None:
    found = imports(ROOT / "pacer" / "baselines.py")
    assert {m.split(".")[1] for m in within("pacer", found) if "." in m} == {"policy"}


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
        "import gpu.ntt\nfrom gpu import pool\nif True:\n    from gpu.worker import x\n"
        "from . import sibling\nimport numpy as np\n"
    )
    assert within("gpu", imports(source)) == [
        "gpu", "gpu.ntt", "gpu.pool", "gpu.worker", "gpu.worker.x"
    ]  # fmt: skip
