"""ssft-encode MODEL --data DATASET --output INDEX_DIR — encode a corpus once and build its faiss index.

The corpus (documents, or ``--passage-words`` passages) is cut into shards of ``--shard-size`` units, encoded with
the model's document tower at ``--precision`` and written as float16 ``INDEX_DIR/shards/NNNNN.npy``; under
``accelerate launch --num_processes N`` each process encodes every N-th shard. A killed run started again with the
same arguments skips the shards already written. Then the main process builds the index (``--index``: flat, ivf,
hnsw, pq, ivfpq, or a faiss index_factory string) from the shards and writes ``index.faiss`` + ``index.json``;
``ssft-retrieve MODEL --index-dir INDEX_DIR`` retrieves from it (memory-mapped where faiss allows) without encoding
the corpus again. INDEX_DIR follows the output-folder rule of ``ssft.core.run_folder``: a new or empty folder, or an earlier
ssft-encode folder (of the same model and corpus: resumed); never the model or dataset read, a folder holding one or
a folder inside one; locked (``.ssft.lock``) while it is written.
"""
from __future__ import annotations

import argparse
import os
import sys

from ssft.cli._common import (
    add_precision_argument,
    at_least_one,
    dataset_sources,
    model_dir,
    model_sources,
    output_path,
    parse_args,
    precision_of,
    setup_logging,
)
from ssft.core.errors import SsftError, cli_entry, user_path


@cli_entry("ssft-encode")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ssft-encode", description="Encode a corpus with a dense model and index it.")
    parser.add_argument("model", type=user_path, help="output folder of ssft-train (or its model/ folder)")
    parser.add_argument("--data", required=True, help="BEIR folder, or dataset name under $SSFT_DATA_HOME")
    parser.add_argument("--output", required=True, type=output_path, help="folder for the shards and the index")
    parser.add_argument("--index", default="flat", help="flat, ivf, hnsw, pq, ivfpq, or a faiss index_factory string")
    parser.add_argument("--no-index", action="store_true", help="encode only (build the index later with --index)")
    parser.add_argument("--nprobe", type=int, default=16, help="IVF lists searched per query (kept in index.json)")
    parser.add_argument("--shard-size", type=int, default=10_000, help="units per shard (default 10000)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--passage-words", type=int, default=None, help="split documents into passages of N words (maxP)")
    parser.add_argument("--passage-stride", type=int, default=None, help="words between passage starts (default N)")
    add_precision_argument(parser)
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="run Python code the saved model ships (a model saved with trust_remote_code); only for "
                             "models you trust")
    ns = parse_args(parser, argv)

    setup_logging("INFO")
    at_least_one(ns, "batch_size", "shard_size", "nprobe")
    if ns.passage_words is not None and ns.passage_words < 1:
        raise SsftError("--passage-words must be >= 1")
    precision = precision_of(ns)
    out = ns.output
    from ssft.core.run_folder import ENCODE_MARKERS, ENCODE_OUTPUTS, OutputFolder

    # the output-folder rule (ssft.core.run_folder): new, empty or an earlier ssft-encode folder (resumed), never the
    # model or dataset read nor a folder around or inside one; under accelerate launch only the main process locks it
    main_process = os.environ.get("RANK", "0") == "0"
    folder = OutputFolder(out, "ssft-encode", ENCODE_OUTPUTS, ENCODE_MARKERS, where="--output",
                          sources=model_sources(ns.model, model_dir(ns.model))
                          + dataset_sources(ns.data, "the dataset folder being encoded"))
    folder.check(check_lock=main_process)
    from ssft.eval.index import KINDS

    if ns.index not in KINDS and not ns.index[:1].isupper():  # a factory string starts with its first stage's name
        raise SsftError(f"--index: expected one of {', '.join(KINDS)} or a faiss index_factory string, got '{ns.index}'")
    from accelerate import PartialState

    from ssft.core.precision import set_precision
    from ssft.data.beir import load_dataset
    from ssft.eval.index import build_saved_index, check_index
    from ssft.models import load_ranker
    from ssft.models.corpus import corpus_units, encode_shards

    state = PartialState() if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None  # accelerate launch: the group
    dataset = load_dataset(ns.data)
    folder.add_sources((dataset.path, "the dataset folder being encoded"))
    model = load_ranker(model_dir(ns.model), trust_remote_code=ns.trust_remote_code)
    if not model.full_retrieval:
        raise SsftError(f"{ns.model}: a corpus index needs a single-vector dense model (architecture 'dense'), "
                        f"not '{model.architecture}'")
    if state is not None:
        model.to(state.device)
    model = set_precision(model, precision)
    if model.document_teacher is not None:
        model.document_teacher.set_precision(precision)
    unit_ids, texts = corpus_units(dataset, ns.passage_words, ns.passage_stride)
    settings = {"data": str(dataset.path), "passage_words": ns.passage_words, "passage_stride": ns.passage_stride}
    if not ns.no_index:  # an index too big to train on this corpus is refused before anything is encoded
        check_index(ns.index, len(unit_ids), model.embedding_dim)
    if main_process:
        folder.claim()  # the lock, held until the index is written; a second ssft-encode here is refused
    if state is not None:
        state.wait_for_everyone()  # the folder exists (and is locked) before any process writes a shard
    try:
        manifest = encode_shards(model, unit_ids, texts, out, ns.shard_size, ns.batch_size, settings)
        if not ns.no_index and (state is None or state.is_main_process):
            info = build_saved_index(out, ns.index, nprobe=ns.nprobe)
            print(f"{info['vectors']} vectors ({manifest['precision']}) in {manifest['shards']} shard(s), index "
                  f"{info['factory']}: {out}")
        if state is not None:
            state.wait_for_everyone()
    except BaseException:
        folder.abandon()  # e.g. a folder of another encoding, refused before a shard is written: left as it was
        raise
    folder.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
