"""What every configuration file shares: `ConfigError`, the safe YAML reader (duplicate keys
refused), paths relative to the file, and the validator kit of `tvbod.core.validate`, whose
`InvalidValue` becomes a `ConfigError` naming the file (`in_file`)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import yaml

from tvbod.core.errors import InvalidValue, TvbodError
from tvbod.core.validate import string


class ConfigError(TvbodError, ValueError):
    """A configuration file is invalid. `file`, `key` (dotted path, None for the whole file),
    `problem`, `allowed` (what would be accepted, or None) and `line` (YAML syntax errors)."""

    def __init__(self, file: Path | str, key: str | None, problem: str, allowed: str | None = None,
                 line: int | None = None) -> None:
        self.file, self.key, self.problem = Path(file), key, problem
        self.allowed, self.line = allowed, line
        text = f"{file}" + (f":{line}" if line else "") + ": " + (f"{key}: " if key else "")
        text += problem
        super().__init__(text + (f" (allowed: {allowed})" if allowed else ""))


@contextmanager
def in_file(path: Path) -> Iterator[None]:
    """Turn a validator's `InvalidValue` (a key and a problem) into a `ConfigError` for `path`."""
    try:
        yield
    except InvalidValue as e:
        raise ConfigError(path, e.key, e.problem, e.allowed) from None


def path_value(value, key: str, base: Path, env: Mapping[str, str]) -> Path:
    """A path from the file: `~` is the user's home, a relative path is relative to `base`."""
    s = string(value, key)
    if s == "~" or s.startswith("~/"):
        s = str(home(env)) + s[1:]
    return Path(os.path.normpath(base / s))


def home(env: Mapping[str, str]) -> Path:
    return Path(env["HOME"]) if env.get("HOME") else Path.home()


# ---------------------------------------------------------------------- reading YAML
class _DuplicateKey(TvbodError):
    """Raised inside the loader; `read_yaml` turns it into a `ConfigError` with the dotted key."""

    def __init__(self, mapping, name: str, first: int, second: int) -> None:
        super().__init__(name)
        self.mapping, self.name, self.first, self.second = mapping, name, first, second


def _strict_loader(base: type) -> type:
    """`base` (a safe loader class) whose mappings refuse a key that appears twice."""

    class Strict(base):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                lines: dict[str, int] = {}
                for k, _ in node.value:  # the keys as written, before `<<` merges are flattened
                    name = k.value if isinstance(k, yaml.ScalarNode) else "?"
                    line = k.start_mark.line + 1
                    if name in lines and name != "<<":
                        raise _DuplicateKey(node, name, lines[name], line)
                    lines[name] = line
            return super().construct_mapping(node, deep=deep)

    Strict.__name__ = f"Strict{base.__name__}"
    return Strict


#: libyaml's parser (18x faster on a large matrix) when PyYAML has it; the pure one otherwise.
_LOADER = _strict_loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader))
_PURE_LOADER = _strict_loader(yaml.SafeLoader)


def _parse(text: str, loader: type):
    """The document of `text`, parsed once: the root node is kept to name a duplicate key."""
    parser = loader(text)
    try:
        root = parser.get_single_node()
        try:
            return parser.construct_document(root) if root is not None else None
        except _DuplicateKey as e:
            e.mapping = _key_path(root, e.mapping, "", set()) or ""
            raise
    finally:
        parser.dispose()


def _key_path(node, target, prefix: str, seen: set[int]) -> str | None:
    """The dotted prefix (`optimizer.kernel.`) of the mapping node `target` under `node`."""
    if node is target:
        return prefix
    if id(node) in seen:
        return None
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        children = [(f"{prefix}{k.value if isinstance(k, yaml.ScalarNode) else '?'}.", v)
                    for k, v in node.value]
    elif isinstance(node, yaml.SequenceNode):
        children = [(f"{prefix.rstrip('.')}[{i}].", v) for i, v in enumerate(node.value)]
    else:
        return None
    for p, child in children:
        found = _key_path(child, target, p, seen)
        if found is not None:
            return found
    return None


def read_yaml(path: Path) -> Mapping:
    """Parse `path` once with the safe loader (libyaml's when available); refuse duplicate keys
    (YAML would keep the last)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, None, "file not found") from None
    except UnicodeDecodeError:
        raise ConfigError(path, None, "is not UTF-8 text") from None
    except OSError as e:
        raise ConfigError(path, None, f"cannot be read ({e.strerror})") from None
    try:
        try:
            data = _parse(text, _LOADER)
        except yaml.YAMLError:
            if _LOADER is _PURE_LOADER:
                raise
            data = _parse(text, _PURE_LOADER)  # the pure parser's wording, as documented
    except _DuplicateKey as e:
        raise ConfigError(path, e.mapping + e.name,
                          f"appears twice (lines {e.first} and {e.second})", line=e.second) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise ConfigError(path, None, f"invalid YAML: {e.problem or e.context}",
                          line=mark.line + 1 if mark else None) from None
    except yaml.YAMLError as e:
        raise ConfigError(path, None, f"invalid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(path, None,
                          f"must hold a mapping at the top level, got {type(data).__name__}")
    return data


def plain(value, depth: int = 0):
    """A deep copy of YAML data as dicts, lists and scalars (refusing absurd nesting)."""
    if depth > 32:
        raise InvalidValue("optimizer", "is nested too deeply")
    if isinstance(value, Mapping):
        return {k: plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, depth + 1) for v in value]
    return value


