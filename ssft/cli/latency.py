"""ssft-latency MODEL --data D: query (and document) encoding latency of a bi-encoder (``ssft.eval.latency``)."""
from __future__ import annotations

import sys

from ssft.cli._common import (
    add_backend_argument,
    add_model_argument,
    add_precision_argument,
    add_trust_argument,
    backend_value,
    make_parser,
    model_argument,
    parse_args,
    precision_value,
)
from ssft.core.errors import cli_entry, user_path


@cli_entry("ssft-latency")
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("ssft-latency", "Query encoding latency of a bi-encoder.")
    add_model_argument(parser)
    parser.add_argument("--data", required=True, help="BEIR folder or dataset name; its queries are timed")
    parser.add_argument("--split", default=None, help="take the queries of this qrels split (default: all queries)")
    parser.add_argument("--batch-sizes", default="1,32", help="comma-separated batch sizes to time")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per batch size (the median is reported)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--max-queries", type=int, default=256, help="time at most this many queries")
    parser.add_argument("--tower", choices=["query", "document", "both"], default="query", help="which tower is timed")
    parser.add_argument("--output", type=user_path, default=None, help="folder for latency.json")
    add_trust_argument(parser)
    add_precision_argument(parser)
    add_backend_argument(parser)
    ns = parse_args(parser, argv)
    from ssft.core.io import atomic_write_json
    from ssft.eval.latency import format_latency
    from ssft.pipeline.latency import batch_size_list, model_latency

    results = model_latency(model_argument(ns, ns.output), ns.data, split=ns.split,
                            batch_sizes=batch_size_list(ns.batch_sizes),
                            repeats=ns.repeats, threads=ns.threads, tower=ns.tower, max_queries=ns.max_queries,
                            precision=precision_value(ns), trust_remote_code=ns.trust_remote_code,
                            backend=backend_value(ns))
    print(format_latency(results))
    if ns.output:
        atomic_write_json(ns.output / "latency.json", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
