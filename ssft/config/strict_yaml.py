"""Strict YAML: ``yaml.safe_load`` that also refuses duplicate keys and alias bombs, for recipes and sweep grids."""
from __future__ import annotations

from typing import Any

import yaml

from ssft.core.errors import SsftError

YAML_MAX_VALUES = 100_000  # values a YAML document may expand to through aliases (a recipe has a few hundred)


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate keys in a mapping (YAML keeps the last one silently: ``adapter:``
    given twice became the other method) and documents that expand past ``YAML_MAX_VALUES`` values through
    aliases (a 1 kB "billion laughs" file is gigabytes once expanded), or that contain themselves."""

    source = "<yaml>"
    line_numbers = True
    key_prefix = ""

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _check_nodes(node, self.source, self.line_numbers, self.key_prefix)
        return node


def _check_nodes(root, source: str, line_numbers: bool, prefix: str = "") -> None:
    """Duplicate keys and the expanded size of the node graph (aliases are shared nodes: memoised, so linear)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def where(node, path: str) -> str:
        line = f":{node.start_mark.line + 1}" if line_numbers and node.start_mark is not None else ""
        return f"{source}{line}: {path or '<top level>'}"

    def visit(node, path: str) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise SsftError(f"{where(node, path)}: a YAML alias (*name) refers to a value that contains it; refused")
        active.add(key)
        size = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], Any] = {}
            for key_node, value_node in node.value:
                name = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                child = f"{path}.{name}" if path and name is not None else (name if name is not None else path)
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    _refuse_duplicate(seen, key_node, where(key_node, child), line_numbers)
                size += visit(key_node, child) + visit(value_node, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                size += visit(item, f"{path}[{i}]")
        if size > YAML_MAX_VALUES:
            raise SsftError(f"{where(node, path)}: expands to more than {YAML_MAX_VALUES:,} values through YAML "
                            f"aliases (*name); refused")
        active.discard(key)
        sizes[key] = size
        return size

    visit(root, prefix)


def _refuse_duplicate(seen: dict[tuple[str, str], Any], key_node, where: str, line_numbers: bool) -> None:
    """A key given twice in one mapping (``seen``: its keys so far): YAML would keep the last one silently."""
    previous = seen.get((key_node.tag, key_node.value))
    if previous is not None:
        first = f" (first given on line {previous.start_mark.line + 1})" if line_numbers else ""
        raise SsftError(f"{where}: duplicate key{first}; YAML would silently keep only the last one, remove the other")
    seen[(key_node.tag, key_node.value)] = key_node


def safe_load_strict(text: str, source: str, line_numbers: bool = True, key_prefix: str = "") -> Any:
    """``yaml.safe_load`` of ``text`` that also refuses duplicate keys and alias bombs (one-line SsftErrors naming
    ``source``, its line when ``line_numbers``, and the key, below ``key_prefix`` for an override's value).
    Malformed YAML raises ``yaml.YAMLError`` as before."""
    loader = _StrictLoader(text)
    loader.source, loader.line_numbers, loader.key_prefix = source, line_numbers, key_prefix
    try:
        return loader.get_single_data()
    except RecursionError:
        raise SsftError(f"{source}: YAML nested too deeply") from None
    finally:
        loader.dispose()


__all__ = ["YAML_MAX_VALUES", "safe_load_strict"]
