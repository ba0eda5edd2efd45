"""Where ssft finds and keeps files: the dataset folder (``$SSFT_DATA_HOME``), its cache (``$SSFT_CACHE``) and the
name of a saved model's spec file."""
from __future__ import annotations

import os
from pathlib import Path

SPEC_FILE = "ssft_model.json"  # a saved ssft model folder: architecture, base model, method and its options, lengths


def data_home() -> Path | None:
    """``$SSFT_DATA_HOME``: the folder under which a dataset may be named by its folder name (None when unset)."""
    home = os.environ.get("SSFT_DATA_HOME")
    return Path(home).expanduser() if home else None


def cache_home() -> Path:
    """``$SSFT_CACHE`` (default ``~/.cache/ssft``): downloads, unpacked models, embedding caches."""
    return Path(os.environ.get("SSFT_CACHE", Path.home() / ".cache" / "ssft")).expanduser()


def offline() -> bool:
    """Whether the user said ssft runs offline (``HF_HUB_OFFLINE=1``): nothing is downloaded, from any source."""
    return os.environ.get("HF_HUB_OFFLINE", "0") in ("1", "true", "TRUE", "yes")


__all__ = ["SPEC_FILE", "cache_home", "data_home", "offline"]
