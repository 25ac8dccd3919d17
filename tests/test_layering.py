"""The package's layering: the daemon and the core never import the adapters package,
and no two modules of tvbod import each other (directly or around a loop)."""

import ast
from pathlib import Path

import tvbod
from probes import loaded_modules

ROOT = Path(tvbod.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports anywhere (top level or inside a function), absolute names."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import module` imports the module; any other name, the package.
            subs = {f"{base}.{a.name}" for a in node.names}
            out.update(subs & _MODULES if subs <= _MODULES else subs | {base})
    return out


_MODULES = {_module_name(p) for p in ROOT.rglob("*.py")}


def _tvbod_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    return {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}


def test_service_and_core_sources_never_name_plant_adapters():
    offenders = sorted(
        f"{_module_name(p)} imports {i}"
        for sub in ("service", "core") for p in (ROOT / sub).rglob("*.py")
        for i in _imports(p) if i.split(".")[0] == "plant_adapters")
    offenders += [f"tvbod.client imports {i}" for i in _imports(ROOT / "client.py")
                  if i.split(".")[0] == "plant_adapters"]
    assert offenders == []


def test_importing_every_service_module_loads_no_adapter_module():
    loaded = loaded_modules("import tvbod.client", walk=("tvbod.core", "tvbod.service"))
    assert sorted(m for m in loaded if m.split(".")[0] == "plant_adapters") == []


def test_no_import_loop_between_modules_of_tvbod():
    graph = _tvbod_graph()
    # The scan sees real edges (a lazy import inside a function counts too).
    assert "tvbod.bench.composition" in graph["tvbod.bench.adaptive"]
    loops = []
    for a, targets in graph.items():
        for b in targets:
            seen, stack = set(), [b]
            while stack:
                m = stack.pop()
                if m == a:
                    loops.append(f"{a} -> {b} -> ... -> {a}")
                    break
                if m not in seen:
                    seen.add(m)
                    stack.extend(graph.get(m, ()))
    assert loops == [], loops[:5]
