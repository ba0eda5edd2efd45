"""ssft-export MODEL --output DIR [--format auto|cross-encoder|sentence-transformers|multi-vector|openvino] [--overwrite]
[--push-to-hub REPO_ID]

Writes a trained run's model (or a saved model folder, or a checkpoint ssft imports: by folder or hub id) in the
format sentence-transformers, PyLate and transformers load: cross → a sequence-classification folder (CrossEncoder,
AutoModelForSequenceClassification), twin / dense → a SentenceTransformer folder (a Router when query and document
towers differ), colbert → a MultiVectorEncoder folder; LoRA merged first, with a model card (a training run's recipe
and metrics in it). Methods a standard forward cannot express are refused in one line. The folder is written under a
temporary name beside DIR and renamed into place: never half-written (``ssft.pipeline.export``). DIR follows the
output-folder rule of ``ssft.core.run_folder``: new, empty or an earlier ssft-export (``--overwrite`` replaces only
what ssft-export wrote); never the model being exported, its run folder, a folder holding it, a folder inside it,
``.`` or a folder above it; locked while written.
"""
from __future__ import annotations

import logging
import sys

from ssft.cli._common import add_model_argument, add_trust_argument, make_parser, output_path, parse_args, setup_logging
from ssft.core.errors import cli_entry

logger = logging.getLogger("ssft")
FORMAT_CHOICES = ("auto", "cross-encoder", "sentence-transformers", "multi-vector", "openvino")


@cli_entry("ssft-export")
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("ssft-export", "Export a model for sentence-transformers / transformers / PyLate.")
    add_model_argument(parser)
    parser.add_argument("--output", required=True, type=output_path,
                        help="folder to write the exported model into (new, empty, or an earlier ssft-export)")
    parser.add_argument("--format", choices=FORMAT_CHOICES, default="auto",
                        help="auto: by architecture: cross → cross-encoder, twin / dense → sentence-transformers, "
                             "colbert → multi-vector; openvino: that format plus the OpenVINO IR of its transformer(s) "
                             "(openvino/openvino_model.xml, sentence-transformers' backend=\"openvino\" layout; needs "
                             "pip install 'ssft[openvino]')")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier ssft-export in --output (only what ssft-export wrote; your files stay)")
    parser.add_argument("--push-to-hub", metavar="REPO_ID", help="upload the export to this hub repository (needs a token)")
    parser.add_argument("--private", action="store_true", help="with --push-to-hub: create the repository private")
    add_trust_argument(parser)
    ns = parse_args(parser, argv)
    setup_logging("INFO")
    from ssft.api import export

    info = export(ns.model, ns.output, ns.format, overwrite=ns.overwrite, push_to_hub=ns.push_to_hub,
                  trust_remote_code=ns.trust_remote_code, private=ns.private)
    print(f"exported {ns.model} as {info['format']} to {info['output']} (load with sentence-transformers' "
          f"{info['loader']})")
    for note in info.get("notes", []):
        print(f"  - {note}")
    if ns.push_to_hub:
        print(f"pushed to https://huggingface.co/{ns.push_to_hub}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
