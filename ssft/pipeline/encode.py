"""Encode a corpus once into float16 shards and build its faiss index: what ssft-encode and ``ssft.encode`` run.

The corpus (documents, or ``passage_words`` passages) is cut into shards of ``shard_size`` units, encoded with the
model's document tower and written as ``OUTPUT/shards/NNNNN.npy``; under ``accelerate launch --num_processes N`` each
process encodes every N-th shard. A killed run started again with the same arguments skips the shards already
written. Then the main process builds the index from the shards (``ssft.eval.index``): the shards of every process,
so the index is the one a single process would build. A ColBERT model's shards hold every document's token vectors
and its index is over those tokens (``ssft.eval.colbert_index`` retrieves from it, the shards kept for MaxSim).
The output folder follows the output-folder rule of ``ssft.core.run_folder`` (an earlier folder of the same model and
corpus is resumed) and is locked while it is written."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from accelerate import PartialState

from ssft.core import distributed
from ssft.core import precision as precisions
from ssft.core.arguments import whole_number
from ssft.core.errors import SsftError
from ssft.core.run_folder import ENCODE_MARKERS, ENCODE_OUTPUTS, OutputFolder
from ssft.data.beir import IRDataset, load_dataset
from ssft.data.corpus_file import write_corpus
from ssft.eval.index import CORPUS_FILE, KINDS, PLAID, build_saved_index, check_index
from ssft.models.base import Ranker
from ssft.models.corpus import corpus_units, encode_shards, multi_vector
from ssft.models.interop import openvino
from ssft.pipeline.sources import ModelInput, dataset_sources, whole_numbers


def _check_index_kind(index: str, ranker: Ranker, late: bool, units: int, name: str) -> None:
    """Refuse an index the model's vectors cannot fill, before anything is encoded."""
    if late:  # the token count is known once encoded: the kind is checked here, its size then
        check_index(index, 10**9, ranker.dim)
    elif index == PLAID:
        raise SsftError(f"--index plaid: indexes a ColBERT model's token vectors; {name} is a dense model "
                        f"(one vector per document): use --index flat, ivf, hnsw, pq or ivfpq")
    else:  # an index too big to train on this corpus
        check_index(index, units, ranker.embedding_dim)


def encode_corpus(model: str | Path | Ranker, data: str | IRDataset, output: Path, *, index: str = "flat",
                  build_index: bool = True,
                  nprobe: int | None = None, shard_size: int = 10_000, batch_size: int = 64, passage_words: int | None = None,
                  passage_stride: int | None = None, precision: str = precisions.DEFAULT,
                  trust_remote_code: bool = False, backend: str | None = None, model_name: str | None = None,
                  extra_settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Encode ``data``'s corpus into ``output`` and, with ``build_index``, build its ``index`` (module docstring).
    ``data``: a dataset name or folder, or a corpus already read (``ssft.data.corpus_file.read_corpus``: a file or a
    list of texts), which is then written beside the shards as ``corpus.jsonl``. ``model_name``: how the model is
    loaded again (``Index.load``), recorded in encode.json (default: its path); ``extra_settings``: more of it.
    ``backend``: torch, openvino or auto (None: auto); int8 runs on openvino, calibrated on texts drawn from the
    corpus encoded.
    Returns ``{"output", "manifest" (the shards'), "index" (index.json's content, or None)}``."""
    whole_numbers(batch_size=batch_size, shard_size=shard_size)
    whole_number(nprobe, "--nprobe", allow_none=True)
    if passage_words is not None and passage_words < 1:
        raise SsftError("--passage-words must be >= 1")
    precision = precisions.check(precision, "--precision")
    backend = openvino.check_serving(backend or openvino.DEFAULT_BACKEND, precision)
    # the output-folder rule (ssft.core.run_folder): new, empty or an earlier ssft-encode folder (resumed), never the
    # model or dataset read nor a folder around or inside one; under accelerate launch only the main process locks it
    main_process = os.environ.get("RANK", "0") == "0"
    source = ModelInput(model)
    own = isinstance(data, IRDataset)  # a corpus of the user's own, kept in the folder
    sources = () if own else dataset_sources(data, "the dataset folder being encoded")
    folder = OutputFolder(output, "ssft-encode", ENCODE_OUTPUTS, ENCODE_MARKERS, where="--output",
                          sources=source.sources + sources)
    folder.check(check_lock=main_process)
    if index not in KINDS and not index[:1].isupper():  # a factory string starts with its first stage's name
        raise SsftError(f"--index: expected one of {', '.join(KINDS)} or a faiss index_factory string, got '{index}'")
    state = PartialState() if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None  # accelerate launch: the group
    dataset = data if own else load_dataset(data)
    if not own:
        folder.add_sources((dataset.path, "the dataset folder being encoded"))
    ranker = source.load(trust_remote_code)
    late = multi_vector(ranker)
    if not ranker.full_retrieval and not late:
        raise SsftError(f"{source.name}: a corpus index needs a dense or a ColBERT model (architecture 'dense' or "
                        f"'colbert'), not '{ranker.architecture}'")
    if state is not None:
        ranker.to(state.device)
    unit_ids, texts = corpus_units(dataset, passage_words, passage_stride)
    ranker, _, _ = openvino.serve(ranker, backend, precision, texts, inputs=len(texts))  # int8: calibrated on them
    settings = {"data": None if own else str(dataset.path), "passage_words": passage_words,
                "passage_stride": passage_stride}
    if model_name or source.path is not None:  # what Index.load serves the queries with when given no model
        settings["model"] = str(model_name or source.path)
    settings.update(extra_settings or {})
    if build_index:
        _check_index_kind(index, ranker, late, len(unit_ids), source.name)
    if main_process:
        folder.claim()  # the lock, held until the index is written; a second ssft-encode here is refused
    # the process group's own ranks: accelerate's PartialState calls every CPU process of --multi_gpu its main one
    distributed.barrier()  # the folder exists (and is locked) before any process writes a shard
    info = None
    try:
        manifest = encode_shards(ranker, unit_ids, texts, output, shard_size, batch_size, settings)
        if own and distributed.rank() == 0:
            write_corpus(dataset, Path(output) / CORPUS_FILE)
        if build_index and distributed.rank() == 0:  # every process's shards, merged into one index
            info = build_saved_index(output, index, nprobe=nprobe)
        distributed.barrier()
    except BaseException:
        folder.abandon()  # e.g. a folder of another encoding, refused before a shard is written: left as it was
        raise
    folder.release()
    return {"output": str(output), "manifest": manifest, "index": info}


__all__ = ["encode_corpus"]
