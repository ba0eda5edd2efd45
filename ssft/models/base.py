"""What every ranker shares: a ``Backbone`` (+ adapter), its tokenizer, ranker-specific modules, save/load.

A saved ranker is a folder:
    ssft_model.json      architecture, base model, method and its options, lengths
    tokenizer files
    adapter/             PEFT adapter (PEFT format: loads with peft.PeftModel.from_pretrained), or
    backbone/            the full fine-tuned transformers model (neither folder: frozen base, loaded by name)
    hidden_prefix.json   001's prefix (an ssft module): its config ...
    hidden_prefix.safetensors   ... and weights
    ranker.safetensors   the ranker's own modules (head, projections)
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ssft.errors import SsftError
from ssft.models.backbone import Backbone

from safetensors import SafetensorError

SPEC_FILE = "ssft_model.json"


def saved_model_folder(name: str | Path) -> Path | None:
    """The saved ssft model folder ``name`` points to (the folder itself or a run folder's ``model/``), or None
    (e.g. for a hub name)."""
    path = Path(name)
    for folder in (path, path / "model"):
        if (folder / SPEC_FILE).is_file():
            return folder
    return None
# what loading a damaged model folder raises (truncated safetensors, bad JSON, missing files, wrong shapes)
LOAD_ERRORS = (OSError, ValueError, RuntimeError, KeyError, EnvironmentError, SafetensorError, json.JSONDecodeError)
PREFIX_CONFIG = "hidden_prefix.json"
PREFIX_WEIGHTS = "hidden_prefix.safetensors"


def load_hidden_prefix(path: Path) -> nn.Module:
    """The saved hidden prefix of a ranker folder, weights checked against its config."""
    from ssft.adapters.hidden_prefix import build_hidden_prefix

    try:
        config = json.loads((path / PREFIX_CONFIG).read_text())
    except json.JSONDecodeError as err:
        raise SsftError(f"{path / PREFIX_CONFIG}: invalid JSON: {err.msg}") from None
    prefix = build_hidden_prefix(config)
    if not (path / PREFIX_WEIGHTS).is_file():
        raise SsftError(f"{path}: missing {PREFIX_WEIGHTS}")
    try:
        prefix.load_state_dict(load_file(path / PREFIX_WEIGHTS), strict=True)
    except SafetensorError as err:
        raise SsftError(f"{path / PREFIX_WEIGHTS}: unreadable safetensors file ({_first_line(err)})") from None
    except RuntimeError as err:
        raise SsftError(f"{path / PREFIX_WEIGHTS}: does not match {PREFIX_CONFIG}: {str(err).splitlines()[0]}") from None
    return prefix


def load_transformer(name: str, trust_remote_code: bool = False):
    """(model, tokenizer) from a hub id or folder, resolved offline where possible."""
    from transformers import AutoModel, AutoTokenizer

    from ssft.models.hub import resolve_model

    path = resolve_model(name)
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the load report lists the unused pooler on every load
    try:
        try:
            model = AutoModel.from_pretrained(path, add_pooling_layer=False, trust_remote_code=trust_remote_code)
        except TypeError:  # architectures without a pooler argument
            model = AutoModel.from_pretrained(path, trust_remote_code=trust_remote_code)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except LOAD_ERRORS as err:  # corrupt or truncated weights, a config.json that is not JSON, no tokenizer files
        raise SsftError(f"model '{name}' at {path} could not be loaded: {_first_line(err)}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    return model, tokenizer


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def save_backbone(backbone: Backbone, folder: Path, base_model: str, frozen_base: bool) -> None:
    """One backbone into ``folder``: ``adapter/`` (PEFT format) or ``backbone/`` (full weights) or nothing (a
    frozen base, loaded by name), plus the hidden prefix files when it has one."""
    if backbone.is_peft:
        import warnings

        for peft_config in backbone.model.peft_config.values():
            peft_config.base_model_name_or_path = base_model
        with warnings.catch_warnings():  # PEFT looks the base model up on the hub to check the vocabulary
            warnings.filterwarnings("ignore", message="Could not find a config file")
            backbone.model.save_pretrained(folder / "adapter")
    elif not frozen_base:
        backbone.base_model.save_pretrained(folder / "backbone")
    if backbone.hidden_prefix is not None:
        prefix = backbone.hidden_prefix
        (folder / PREFIX_CONFIG).write_text(json.dumps(prefix.config_dict(), indent=2) + "\n")
        save_file({k: v.detach().contiguous() for k, v in prefix.state_dict().items()}, folder / PREFIX_WEIGHTS)


def load_backbone(path: Path, method: str, base_model: str, trust: bool, spec: dict[str, Any],
                  layers: int | list[int] | None = None) -> Backbone:
    """Inverse of ``save_backbone``: the backbone saved in ``path`` on top of ``base_model``. ``layers``: the
    layer subset the saved backbone was built on (``select_layers``), re-applied to a base loaded by name
    before its adapter (a saved ``backbone/`` already holds only those layers)."""
    from peft import PeftModel
    from transformers import AutoModel

    from ssft.models.backbone import select_layers
    from ssft.registry import ADAPTERS

    def base() -> nn.Module:
        transformer, _ = load_transformer(base_model, trust)
        if layers is not None:
            select_layers(transformer, layers, base_model, f"{path}/{SPEC_FILE}: query_layers")
        return transformer

    adapter_cls = ADAPTERS.get(method) if method in ADAPTERS else None
    if adapter_cls is not None and hasattr(adapter_cls, "load_backbone"):  # e.g. several named PEFT adapters
        backbone = adapter_cls.load_backbone(base(), path, spec)
    elif (path / "adapter").is_dir():
        model = PeftModel.from_pretrained(base(), path / "adapter", is_trainable=False)
        backbone = Backbone(model, method)
    elif (path / "backbone").is_dir():
        try:
            transformer = AutoModel.from_pretrained(path / "backbone", add_pooling_layer=False, trust_remote_code=trust)
        except TypeError:
            transformer = AutoModel.from_pretrained(path / "backbone", trust_remote_code=trust)
        backbone = Backbone(transformer, method)
    elif Ranker._frozen_base_method(method):
        transformer = base()
        for p in transformer.parameters():
            p.requires_grad_(False)
        backbone = Backbone(transformer, method)
    else:
        raise SsftError(f"{path}: no adapter/ or backbone/ folder")
    if (path / PREFIX_CONFIG).is_file():
        backbone.hidden_prefix = load_hidden_prefix(path)
    return backbone


class Ranker(nn.Module):
    """Base class. Subclasses set ``architecture`` and define ``forward`` and their ranker modules."""

    architecture = ""
    model_options: tuple[str, ...] = ()  # ModelConfig keys the architecture reads (kept in the spec)
    backbone_prefixes: tuple[str, ...] = ("backbone.",)  # state-dict prefixes saved with the backbone, not the head

    def __init__(self, backbone: Backbone, tokenizer, spec: dict[str, Any]):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.spec = spec

    def token_cache(self, tokenizer=None):
        """The ``TokenCache`` of ``tokenizer`` (default: the ranker's): each distinct text tokenised once."""
        from ssft.data.tokens import TokenCache

        tokenizer = tokenizer if tokenizer is not None else self.tokenizer
        caches = self.__dict__.setdefault("_token_caches", {})  # plain attribute: never in the state dict
        if id(tokenizer) not in caches:
            caches[id(tokenizer)] = TokenCache(tokenizer, max(self.spec["max_length"], self.spec["query_max_length"]))
        return caches[id(tokenizer)]

    # ------------------------------------------------------------ building
    @classmethod
    def build(cls, model_cfg, method: str, options: dict[str, Any]) -> "Ranker":
        from ssft.registry import ADAPTERS

        adapter = ADAPTERS.get(method)
        config = adapter.config_from(options)
        transformer, tokenizer = load_transformer(model_cfg.name, model_cfg.trust_remote_code)
        for p in transformer.parameters():
            p.requires_grad_(False)
        backbone = adapter.apply(transformer, config)
        spec = cls.build_spec(model_cfg, method, options)
        return cls(backbone, tokenizer, spec)

    @classmethod
    def build_spec(cls, model_cfg, method: str, options: dict[str, Any]) -> dict[str, Any]:
        """What ``ssft_model.json`` records of a built ranker: enough to load it back."""
        return {
            "architecture": cls.architecture,
            "base_model": model_cfg.name,
            "method": method,
            "options": dict(options),
            "max_length": model_cfg.max_length,
            "query_max_length": model_cfg.query_max_length,
            "trust_remote_code": model_cfg.trust_remote_code,
            **{key: getattr(model_cfg, key) for key in cls.model_options},
        }

    def ranker_state(self) -> dict[str, torch.Tensor]:
        """Parameters and buffers outside the backbone(s) (heads, projections)."""
        return {k: v.detach().contiguous() for k, v in self.state_dict().items() if not k.startswith(self.backbone_prefixes)}

    def head_parameters(self) -> list[nn.Parameter]:
        return [p for n, p in self.named_parameters() if not n.startswith(self.backbone_prefixes)]

    # ------------------------------------------------------------ save / load
    def save(self, path: str | Path) -> None:
        """Write the ranker folder atomically: complete, or the previous one left in place."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            (tmp / SPEC_FILE).write_text(json.dumps(self.spec, indent=2) + "\n")
            self.tokenizer.save_pretrained(tmp)
            save_backbone(self.backbone, tmp, self.spec["base_model"], self._frozen_base())
            self._save_extra(tmp)
            save_file(self.ranker_state(), tmp / "ranker.safetensors")
            old = None
            if path.exists():
                old = path.with_name(f".{path.name}.old")
                if old.exists():
                    shutil.rmtree(old)
                os.replace(path, old)
            os.replace(tmp, path)
            if old is not None:
                shutil.rmtree(old)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _save_extra(self, folder: Path) -> None:
        """Hook: rankers with more than one backbone write the others here (inside the atomic folder)."""

    @staticmethod
    def read_spec(path: str | Path) -> dict[str, Any]:
        path = Path(path)
        spec_file = path / SPEC_FILE
        if not spec_file.is_file():
            raise SsftError(f"{path}: not a saved ssft model (no {SPEC_FILE})")
        try:
            spec = json.loads(spec_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise SsftError(f"{spec_file}: invalid JSON: {err.msg}") from None
        except UnicodeDecodeError:
            raise SsftError(f"{spec_file}: not a UTF-8 text file") from None
        if not isinstance(spec, dict) or not all(isinstance(spec.get(k), str) for k in ("architecture", "base_model", "method")):
            raise SsftError(f"{spec_file}: expected an object with 'architecture', 'base_model' and 'method' names")
        return spec

    @classmethod
    def load(cls, path: str | Path) -> "Ranker":
        """The ranker saved in ``path``; a damaged folder is an SsftError naming it."""
        try:
            return cls._load(Path(path))
        except SsftError:
            raise
        except LOAD_ERRORS as err:
            raise SsftError(f"{path}: the saved model cannot be loaded ({type(err).__name__}: {_first_line(err)})") from None

    @classmethod
    def _load(cls, path: Path) -> "Ranker":
        from transformers import AutoTokenizer

        path = Path(path)
        spec = cls.read_spec(path)
        backbone = load_backbone(path, spec["method"], spec["base_model"], bool(spec.get("trust_remote_code", False)), spec,
                                 layers=spec.get("query_layers"))
        tokenizer = AutoTokenizer.from_pretrained(path)
        ranker = cls.from_loaded(path, backbone, tokenizer, spec)
        state_file = path / "ranker.safetensors"
        if not state_file.is_file():
            raise SsftError(f"{path}: missing ranker.safetensors")
        missing, unexpected = ranker.load_state_dict(load_file(state_file), strict=False)
        missing = [k for k in missing if not k.startswith(cls.backbone_prefixes)]
        if missing or unexpected:
            raise SsftError(f"{state_file}: does not match a '{spec['architecture']}' ranker (missing {missing}, unexpected {unexpected})")
        for p in ranker.parameters():
            p.requires_grad_(False)
        return ranker.eval()

    def load_weights(self, path: str | Path) -> None:
        """Copy the weights of the saved ranker folder ``path`` into this ranker (same architecture and method),
        in place: what a checkpoint resume needs, with the optimizer still pointing at these parameters."""
        path = Path(path)
        spec = self.read_spec(path)
        for key in ("architecture", "method"):
            if spec.get(key) != self.spec.get(key):
                raise SsftError(f"{path}: a '{spec.get(key)}' {key}, this model's is '{self.spec.get(key)}'")
        source = type(self).load(path).state_dict()
        target = self.state_dict()
        missing = [k for k in target if k not in source]
        wrong = [k for k in target if k in source and source[k].shape != target[k].shape]
        if missing or wrong:
            raise SsftError(f"{path}: does not match this model (missing {missing[:3]}, other shape {wrong[:3]})")
        with torch.no_grad():
            for key, tensor in target.items():
                tensor.copy_(source[key])

    @classmethod
    def from_loaded(cls, path: Path, backbone: Backbone, tokenizer, spec: dict[str, Any]) -> "Ranker":
        """Hook: the ranker around a loaded backbone (rankers with more than one backbone load the others)."""
        return cls(backbone, tokenizer, spec)

    def _frozen_base(self) -> bool:
        return self._frozen_base_method(self.backbone.method)

    @staticmethod
    def _frozen_base_method(method: str) -> bool:
        from ssft.registry import ADAPTERS

        return method in ADAPTERS and bool(getattr(ADAPTERS.get(method), "frozen_base", False))

    @property
    def can_merge(self) -> bool:
        """True for one LoRA adapter that every input goes through (lora, lora++). ss_lora is not mergeable:
        its query and document towers use different adapters, which one set of merged weights cannot hold."""
        b = self.backbone
        return b.method in ("lora", "lora++") and b.tower_switch is None and b.hidden_prefix is None

    def merge_adapter(self) -> None:
        """Fold LoRA weights into the backbone: zero inference overhead, same scores."""
        if not self.can_merge:
            raise SsftError(f"only a single LoRA adapter (lora, lora++) can be merged, not '{self.backbone.method}'")
        self.backbone = Backbone(self.backbone.model.merge_and_unload(), "full")


def load_ranker(path: str | Path) -> Ranker:
    """Load any saved ranker folder, whatever its architecture."""
    from ssft.registry import MODELS

    spec = Ranker.read_spec(path)
    return MODELS.get(spec.get("architecture", ""), f"{path}/{SPEC_FILE}: architecture").load(path)
