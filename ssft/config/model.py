"""The recipe's ``model`` section: the keys every architecture reads (``ModelConfig``), and the keys of the chosen
architecture, parsed into that architecture's typed ``Config`` (``Ranker.Config``, beside its code in
``ssft.models``; ``ModelConfig.config``), as an adapter's options are parsed into its ``Config``.

In YAML the section stays flat (``model: {architecture: twin, name: ..., pooling: cls}``): ``ModelConfig`` keeps the
common keys and the architecture's own keys as the recipe gives them (``options``). A key that only other
architectures read is refused unless it holds their default (it would change nothing); a key no architecture reads
is an unknown key, with the closest name. The ranker layer builds rankers from a ``ModelConfig`` and never sees the
rest of the recipe: this module is what ``ssft.models`` and ``ssft.teachers`` import of ``ssft.config``'s schema.
"""
from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from ssft.config.parse import Checked, Problem, check_type, field_names, parse_dataclass
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError, closest

# what every architecture reads; the other keys of the section belong to the architectures whose Config has them
COMMON_MODEL_KEYS = ("architecture", "name", "max_length", "query_max_length", "head_learning_rate", "trust_remote_code")


def either(names: list[str]) -> str:
    """'a', 'a' or 'b', 'a', 'b' or 'c'."""
    quoted = [f"'{n}'" for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


class ArchitectureConfig(Checked):
    """Base of an architecture's typed ``Config`` (a dataclass of the keys it reads); its ``problem()`` names the key
    (``("head", "expected one of ...")``), said under the section: ``r.yaml: model.head: ...``."""


@dataclass
class NoModelOptions(ArchitectureConfig):
    """The Config of an architecture that reads only the common keys."""


def _default(config_cls: type, key: str) -> Any:
    f = next(f for f in dataclasses.fields(config_cls) if f.name == key)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def architecture_keys() -> dict[str, list[str]]:
    """Every architecture key → the architectures that read it, in registration order (imports every architecture)."""
    readers: dict[str, list[str]] = {}
    for name in MODELS.declared():
        for key in field_names(MODELS.get(name).Config):
            readers.setdefault(key, []).append(name)
    return readers


@dataclass(init=False)
class ModelConfig(Checked):
    """The ``model`` section (see the module doc). ``ModelConfig(architecture="twin", name=..., pooling="cls")`` takes
    the architecture's keys flat, as the YAML does (kept in ``options``); ``config`` is their typed form, parsed on
    first use and again when the architecture or the options were replaced since."""

    architecture: str = "cross"
    name: str = "sentence-transformers/all-MiniLM-L6-v2"
    max_length: int = 256  # cross-encoder: query + document tokens
    query_max_length: int = 32
    head_learning_rate: float | None = 1e-4  # ranker head (001 Table 8); None = training.learning_rate
    trust_remote_code: bool = False
    options: dict[str, Any] = field(default_factory=dict)  # the architecture's keys as given (its Config parses them)

    def __init__(self, options: dict[str, Any] | None = None, **keys: Any):
        for f in dataclasses.fields(self):
            if f.name != "options":
                setattr(self, f.name, keys.pop(f.name) if f.name in keys else f.default)
        self.options = {**(options or {}), **keys}
        self._parsed: tuple[str, dict[str, Any], Any] | None = None

    def problem(self) -> Problem:
        """The common keys' values (the architecture's own: its ``Config``)."""
        if self.head_learning_rate is not None and self.head_learning_rate < 0:
            return "head_learning_rate", f"must be >= 0, got {self.head_learning_rate}"
        if self.max_length < 8 or self.query_max_length < 1:
            return "max_length", "too small"
        return None

    @classmethod
    def from_section(cls, value: Any, where: str = "model") -> ModelConfig:
        """The recipe's flat ``model`` mapping: common keys type-checked, the rest parsed by the architecture's
        ``Config`` (``parse``); every error one line naming ``{where}.key``."""
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise SsftError(f"{where}: expected a mapping, got {type(value).__name__}")
        model = parse_dataclass(cls, {k: v for k, v in value.items() if k in COMMON_MODEL_KEYS}, where)
        model.options = {k: v for k, v in value.items() if k not in COMMON_MODEL_KEYS}
        model.parse(where)
        return model

    def parse(self, where: str = "model") -> Any:
        """The architecture's typed config of ``options``: its own keys parsed by its ``Config`` (types and values
        checked); a key of other architectures only at their default; any other key unknown."""
        ranker = MODELS.get(self.architecture, f"{where}.architecture")
        own = field_names(ranker.Config)
        for key, value in self.options.items():
            if key not in own:
                self._foreign(key, value, where)
        config = parse_dataclass(ranker.Config, {k: v for k, v in self.options.items() if k in own}, where)
        self._parsed = (self.architecture, copy.deepcopy(self.options), config)
        return config

    def _foreign(self, key: str, value: Any, where: str) -> None:
        """A key the architecture does not read: refused unless other architectures read it and it holds their
        default (it would change nothing)."""
        readers = architecture_keys()
        if key not in readers:
            known = [*COMMON_MODEL_KEYS, *readers]
            raise SsftError(f"{where}: unknown key '{key}'{closest(str(key), known)}; known: {', '.join(known)}")
        config_cls = MODELS.get(readers[key][0]).Config
        if check_type(value, typing.get_type_hints(config_cls)[key], f"{where}.{key}") != _default(config_cls, key):
            raise SsftError(f"{where}.{key}: only for model.architecture {either(readers[key])}, not '{self.architecture}'")

    @property
    def config(self) -> Any:
        """The architecture's typed config (its ``Ranker.Config``), e.g. ``TwinConfig(pooling="cls", ...)``."""
        if self._parsed is None or self._parsed[0] != self.architecture or self._parsed[1] != self.options:
            return self.parse()
        return self._parsed[2]

    def to_dict(self) -> dict[str, Any]:
        """The flat section as a resolved recipe writes it: the common keys, then every architecture's keys (this
        architecture's values, the others' defaults), so that it reads back as the same model."""
        out = {key: getattr(self, key) for key in COMMON_MODEL_KEYS}
        for key, readers in architecture_keys().items():
            out[key] = _default(MODELS.get(readers[0]).Config, key)
        out.update(dataclasses.asdict(self.config))
        return out


__all__ = ["COMMON_MODEL_KEYS", "ArchitectureConfig", "ModelConfig", "NoModelOptions", "architecture_keys", "either"]
