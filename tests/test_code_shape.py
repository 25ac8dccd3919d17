"""The code's shape: small modules and classes, the service built by composition, no forwarding
re-exports (docs: the style examples in STYLE.md, modules of one purpose).

Each rule is checked on the package's source with `ast`, and each check is tried on a small
counter-example first, so a rule that cannot fail is noticed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tvbod", "plant_adapters")
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def long_classes(tree: ast.Module) -> list[tuple[str, int]]:
    """`(name, lines)` of the classes longer than MAX_CLASS_LINES."""
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES]


def project_classes() -> set[str]:
    """Names of every class the project defines."""
    return {node.name for path in _modules() for node in ast.walk(_tree(path))
            if isinstance(node, ast.ClassDef)}


def mixed_in(tree: ast.Module, ours: set[str]) -> list[str]:
    """Classes with more than one base among the project's classes (mixins sharing `self`)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
            if sum(b in ours for b in bases) > 1:
                out.append(node.name)
    return out


def forwarded(tree: ast.Module) -> list[str]:
    """Names a module imports at its top level and never uses: re-exports for other modules
    (`from x import y  # noqa: F401`). `__future__` imports and TYPE_CHECKING blocks aside."""
    imported: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                imported[alias.asname or alias.name] = node.lineno
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {n.value.id for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
    text = ast.unparse(tree)
    return sorted(name for name in imported
                  if name not in used and f"'{name}'" not in text and f'"{name}"' not in text)


def string_dispatch(tree: ast.Module) -> list[int]:
    """Lines that call a method picked by name at run time: `getattr(self, <not a literal>)`."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "getattr" and node.args
            and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"
            and len(node.args) > 1 and not isinstance(node.args[1], ast.Constant)]


def test_the_checks_catch_their_counter_examples():
    bad = ast.parse("from a import b\nfrom c import d\nclass M(X, Y):\n"
                    "    def f(self, k):\n        return getattr(self, k)()\n" + "    x = d\n" * 260)
    assert mixed_in(bad, {"X", "Y"}) == ["M"]
    assert forwarded(bad) == ["b"]
    assert string_dispatch(bad) == [5]
    assert long_classes(bad) and long_classes(bad)[0][0] == "M"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_is_at_most_400_lines_and_its_classes_at_most_250(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines"
    assert long_classes(_tree(path)) == []


def test_no_service_class_mixes_in_more_than_one_project_base():
    ours = project_classes()
    found = {str(p.relative_to(ROOT)): mixed_in(_tree(p), ours)
             for p in (ROOT / "tvbod" / "service").rglob("*.py")}
    assert {k: v for k, v in found.items() if v} == {}


def test_no_module_forwards_names_it_imports_but_does_not_use():
    found = {str(p.relative_to(ROOT)): forwarded(_tree(p)) for p in _modules()
             if p.name != "__init__.py"}
    assert {k: v for k, v in found.items() if v} == {}


def test_no_service_method_is_dispatched_by_its_name_as_a_string():
    found = {str(p.relative_to(ROOT)): string_dispatch(_tree(p))
             for p in (ROOT / "tvbod" / "service").rglob("*.py")}
    assert {k: v for k, v in found.items() if v} == {}
