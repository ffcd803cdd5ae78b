"""The layers: pacer's core imports nothing of gpu (the device code comes in by name, as any
workload does), and gpu imports pacer only in the adapter that implements its contract."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETTLE = ROOT / "pacer" / "settle"
"""`pacer settle` cleans up after the GPU pool (its /dev/shm blocks, named by gpu.shm_blocks) and
the synthesis processes (named by gpu.lifeline): it reads their names from where they are made."""
ADAPTER = ROOT / "gpu" / "workload.py"


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
    "path", [p for p in sources("gpu") if p != ADAPTER], ids=lambda p: str(p.relative_to(ROOT))
)
def test_gpu_imports_pacer_only_in_its_workload_adapter(path: Path) -> None:
    assert within("pacer", imports(path)) == []


@pytest.mark.parametrize("path", sources("pacer/service"), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_service_imports_neither_the_api_nor_the_server_around_it(path: Path) -> None:
    found = imports(path)
    assert within("pacer.api", found) + within("pacer.server", found) == []


def test_the_check_sees_imports_of_every_form(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text(
        "import gpu.ntt\nfrom gpu import pool\nif True:\n    from gpu.worker import x\n"
        "from . import sibling\nimport numpy as np\n"
    )
    assert within("gpu", imports(source)) == [
        "gpu", "gpu.ntt", "gpu.pool", "gpu.worker", "gpu.worker.x"
    ]  # fmt: skip
