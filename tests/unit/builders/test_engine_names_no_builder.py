"""The engine names no builder: outside ``nvkr/builders/`` no module imports a builder's package
(what the engine needs of one it asks the Builder protocol and the artifact model), but for the
planner's own builders that ``nvkr/plan.py`` adds to every plan (SBOMs, image indexes, release
sets). Imports inside functions count too: a lazy import still ties the engine to a builder."""

from __future__ import annotations

import ast
from pathlib import Path

import nvkr

ROOT = Path(nvkr.__file__).parent
#: What every module may import of nvkr.builders: the builder API (the protocol), the table and
#: the assets' locator.
SHARED = {"api", "table", "assets"}
#: The planner's own builders, which only the planner adds.
PLANNERS_OWN = {"plan.py": {"image_index", "release_set", "sbom"}}


def _builder_imports(path: Path) -> set[str]:
    """The builder packages ``path`` imports (``go_binary`` for ``nvkr.builders.go_binary.x``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "nvkr.builders":
                names = [f"nvkr.builders.{alias.name}" for alias in node.names]
            else:
                names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["nvkr", "builders"] and len(parts) > 2:
                found.add(parts[2])
    return found


def test_no_engine_module_imports_a_builder() -> None:
    builders = {p.name for p in (ROOT / "builders").iterdir() if (p / "__init__.py").is_file()}
    offenders = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("builders/"):
            continue
        allowed = SHARED | PLANNERS_OWN.get(rel, set())
        named = (_builder_imports(path) & builders) - allowed
        if named:
            offenders[rel] = sorted(named)
    assert offenders == {}


def test_the_check_sees_a_builder_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from nvkr.builders import ActionSpec, rootfs\n"
        "def f():\n"
        "    from nvkr.builders.go_binary.tools_tree import tree_c_toolchain\n"
        "import nvkr.builders.table\n"
    )
    assert _builder_imports(module) == {"ActionSpec", "rootfs", "go_binary", "table"}
