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
def read_yaml(path: Path) -> Mapping:
    """Parse `path` with the safe loader; refuse duplicate keys (YAML would keep the last)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, None, "file not found") from None
    except UnicodeDecodeError:
        raise ConfigError(path, None, "is not UTF-8 text") from None
    except OSError as e:
        raise ConfigError(path, None, f"cannot be read ({e.strerror})") from None
    try:
        _refuse_duplicate_keys(yaml.compose(text, Loader=yaml.SafeLoader), path, "", set())
        data = yaml.safe_load(text)
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


def _refuse_duplicate_keys(node, path: Path, prefix: str, seen_nodes: set[int]) -> None:
    if node is None or id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for k, v in node.value:
            name = k.value if isinstance(k, yaml.ScalarNode) else "?"
            line = k.start_mark.line + 1
            if name in lines and name != "<<":
                raise ConfigError(path, prefix + name,
                                  f"appears twice (lines {lines[name]} and {line})", line=line)
            lines[name] = line
            _refuse_duplicate_keys(v, path, f"{prefix}{name}.", seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _refuse_duplicate_keys(v, path, f"{prefix.rstrip('.')}[{i}].", seen_nodes)


def plain(value, depth: int = 0):
    """A deep copy of YAML data as dicts, lists and scalars (refusing absurd nesting)."""
    if depth > 32:
        raise InvalidValue("optimizer", "is nested too deeply")
    if isinstance(value, Mapping):
        return {k: plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, depth + 1) for v in value]
    return value


