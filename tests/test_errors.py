"""One error root: every exception class tvbod and its adapters define derives from
`tvbod.errors.TvbodError`, which the core re-exports."""

import importlib
import inspect
import pkgutil

import plant_adapters
import tvbod
import tvbod.core
import tvbod.core.errors
import tvbod.errors


def _modules():
    """Every module of both packages (`__main__` modules run a program when imported)."""
    for package in (tvbod, plant_adapters):
        yield package
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.rsplit(".", 1)[-1] != "__main__":
                yield importlib.import_module(info.name)


def _defined_exceptions():
    for module in _modules():
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                yield obj


def test_every_exception_class_in_the_package_derives_from_the_one_root():
    found = sorted(set(_defined_exceptions()), key=lambda c: f"{c.__module__}.{c.__qualname__}")
    names = {c.__qualname__ for c in found}
    # The walk really sees the service's, protocol's, client's and core's exceptions.
    assert {"ProtocolError", "StorageError", "ConfigError", "SpecError", "DaemonError",
            "RestoreError"} <= names, names
    strays = [f"{c.__module__}.{c.__qualname__}" for c in found
              if not issubclass(c, tvbod.errors.TvbodError)]
    assert strays == []


def test_the_core_re_exports_the_root():
    assert tvbod.core.TvbodError is tvbod.errors.TvbodError
    assert tvbod.core.errors.TvbodError is tvbod.errors.TvbodError
    assert issubclass(tvbod.core.SpecError, tvbod.errors.TvbodError)


def test_the_root_module_imports_nothing():
    source = inspect.getsource(tvbod.errors)
    assert "import " not in source.replace("imports nothing", "")
