"""ssft-latency RUN --data D: query (and document) encoding latency of a trained bi-encoder (``ssft.eval.latency``)."""
from __future__ import annotations

import argparse
import sys

from ssft.cli._common import add_precision_argument, model_dir, parse_args, precision_of
from ssft.core.errors import SsftError, cli_entry, user_path


@cli_entry("ssft-latency")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ssft-latency", description="Query encoding latency of a trained bi-encoder.")
    parser.add_argument("model", type=user_path, help="run folder of ssft-train (or its model/ folder)")
    parser.add_argument("--data", required=True, help="BEIR folder or dataset name; its queries are timed")
    parser.add_argument("--split", default=None, help="take the queries of this qrels split (default: all queries)")
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--max-queries", type=int, default=256)
    parser.add_argument("--tower", choices=["query", "document", "both"], default="query")
    parser.add_argument("--output", type=user_path, default=None, help="folder for latency.json")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="run Python code the saved model ships (a model saved with trust_remote_code); only for "
                             "models you trust")
    add_precision_argument(parser)
    ns = parse_args(parser, argv)
    from ssft.core.io import atomic_write_json
    from ssft.data.beir import load_dataset
    from ssft.eval.latency import format_latency, measure_latency
    from ssft.models import load_ranker

    try:
        batch_sizes = tuple(int(b) for b in ns.batch_sizes.split(",") if b.strip())
    except ValueError:
        raise SsftError(f"--batch-sizes: expected integers like 1,32, got '{ns.batch_sizes}'") from None
    precision = precision_of(ns)
    dataset = load_dataset(ns.data)
    qids = sorted(dataset.qrels(ns.split)) if ns.split else sorted(dataset.queries)
    queries = [dataset.queries[q] for q in qids if q in dataset.queries]
    model = load_ranker(model_dir(ns.model), trust_remote_code=ns.trust_remote_code)
    if not model.bi_encoder:
        raise SsftError(f"{ns.model}: query latency is measured for bi-encoders, not '{model.architecture}'")
    from ssft.core.precision import model_precision, set_precision

    model = set_precision(model, precision)  # int8: the quantised copy
    towers = ["query", "document"] if ns.tower == "both" else [ns.tower]
    results = measure_latency(model, queries, batch_sizes, ns.repeats, ns.threads, towers, ns.max_queries)
    for r in results:
        r["precision"] = model_precision(model)
    print(format_latency(results))
    if ns.output:
        atomic_write_json(ns.output / "latency.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
