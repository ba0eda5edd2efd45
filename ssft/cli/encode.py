"""ssft-encode MODEL --data DATASET --output INDEX_DIR — encode a corpus once and build its faiss index.

The corpus (documents, or ``--passage-words`` passages) is cut into shards of ``--shard-size`` units, encoded with
the model's document tower at ``--precision`` and written as float16 ``INDEX_DIR/shards/NNNNN.npy``; under
``accelerate launch --num_processes N`` each process encodes every N-th shard. A killed run started again with the
same arguments skips the shards already written. Then the main process builds the index (``--index``: flat, ivf,
hnsw, pq, ivfpq, or a faiss index_factory string) from the shards and writes ``index.faiss`` + ``index.json``;
``ssft-retrieve MODEL --index-dir INDEX_DIR`` retrieves from it (memory-mapped where faiss allows) without encoding
the corpus again. A ColBERT model's shards hold every document's token vectors and the index is over those tokens
(flat: exact; ivfpq: approximate candidates, re-scored by exact MaxSim from the shards at retrieval).
INDEX_DIR follows the output-folder rule of ``ssft.core.run_folder``: a new or empty folder, or an earlier
ssft-encode folder (of the same model and corpus: resumed); never the model or dataset read, a folder holding one or
a folder inside one; locked (``.ssft.lock``) while it is written.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ssft.cli._common import (
    add_backend_argument,
    add_batch_size_argument,
    add_model_argument,
    add_precision_argument,
    add_trust_argument,
    backend_value,
    make_parser,
    model_argument,
    output_path,
    parse_args,
    precision_value,
    setup_logging,
)
from ssft.core.errors import cli_entry


@cli_entry("ssft-encode")
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("ssft-encode", "Encode a corpus with a dense or ColBERT model and index it.")
    add_model_argument(parser)
    parser.add_argument("--data", required=True, help="BEIR folder, or dataset name under $SSFT_DATA_HOME")
    parser.add_argument("--output", required=True, type=output_path, help="folder for the shards and the index")
    parser.add_argument("--index", default="flat", help="flat, ivf, hnsw, pq, ivfpq, or a faiss index_factory string; "
                        "for a ColBERT model also plaid (centroids + 2-bit residuals, pruned search)")
    parser.add_argument("--no-index", action="store_true", help="encode only (build the index later with --index)")
    parser.add_argument("--nprobe", type=int, default=None,
                        help="IVF lists searched per query, kept in index.json (default: calibrated when the index is "
                             "built: the fewest lists that find 0.99 of the exact top-100 of stored vectors)")
    parser.add_argument("--shard-size", type=int, default=10_000, help="units per shard")
    add_batch_size_argument(parser)
    parser.add_argument("--passage-words", type=int, default=None, help="split documents into passages of N words (maxP)")
    parser.add_argument("--passage-stride", type=int, default=None, help="words between passage starts (default N)")
    add_precision_argument(parser)
    add_backend_argument(parser)
    add_trust_argument(parser)
    ns = parse_args(parser, argv)
    setup_logging("INFO")
    from ssft.pipeline.encode import encode_corpus

    model = model_argument(ns, ns.output)
    result = encode_corpus(model, ns.data, ns.output, index=ns.index, build_index=not ns.no_index, nprobe=ns.nprobe,
                           shard_size=ns.shard_size, batch_size=ns.batch_size, passage_words=ns.passage_words,
                           passage_stride=ns.passage_stride, precision=precision_value(ns),
                           trust_remote_code=ns.trust_remote_code, backend=backend_value(ns),
                           model_name=None if isinstance(model, Path) else ns.model)
    manifest, info = result["manifest"], result["index"]
    if info is not None:
        print(f"{info['vectors']} vectors ({manifest['precision']}) in {manifest['shards']} shard(s), index "
              f"{info['factory']}: {ns.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
