"""ssft-train RECIPE.yaml [key=value ...] — build, train, keep the best validation epoch, evaluate.
``ssft-train --check RECIPE.yaml``: validate the recipe, look up its models and data offline, print the plan; train
nothing, write nothing (``ssft.pipeline.check``). It exits 0 only when the recipe can train here as it is; otherwise
the plan is printed and one ``ssft-train: error:`` line says why not (exit code 2).

Also ``python -m ssft.cli.train``, ``python -m ssft.train`` and ``accelerate launch ssft/train.py RECIPE``."""
from __future__ import annotations

import sys

from ssft.cli._common import make_parser, parse_args, setup_logging
from ssft.core.errors import SsftError, cli_entry


@cli_entry("ssft-train")
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("ssft-train", "Train and evaluate a ranker from a YAML recipe.")
    parser.add_argument("recipe", help="recipe YAML file")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. training.learning_rate=1e-4 adapter.r=8 "
                        "(before or after the options)")
    parser.add_argument("--overwrite", action="store_true",
                        help="train again from scratch into an output folder that holds a finished run or checkpoints "
                             "(its earlier outputs are removed first)")
    parser.add_argument("--resume-with-changes", action="store_true",
                        help="resume from the checkpoints of a run whose recipe differs only in its optimiser settings "
                             "(learning rates, max_grad_norm), e.g. a lower learning rate after a NaN stop")
    parser.add_argument("--check", action="store_true",
                        help="dry validation: parse the recipe, look up its models and datasets offline (no download, "
                             "no weights: their config, tokenizer files and safetensors headers are checked), print the "
                             "plan; train nothing, write nothing. Exit code 0: ready to train here; 2: not ready (a "
                             "model or dataset is not here) or the recipe or a model folder is wrong")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="logging level")
    ns = parse_args(parser, argv, intermixed=True)
    setup_logging(ns.log_level)
    from ssft.config.recipe import load_recipe

    recipe = load_recipe(ns.recipe, ns.overrides)  # the CLI's key=value strings, as typed
    if ns.check:
        if ns.overwrite or ns.resume_with_changes:
            raise SsftError("--check trains nothing: --overwrite and --resume-with-changes do not apply")
        from ssft.pipeline.check import check_recipe

        text, missing = check_recipe(recipe)
        print(text, flush=True)
        if missing is not None:  # the plan is printed; a script running --check first must not go on
            raise SsftError(f"not ready to train here: {missing}")
        return 0
    if ns.overwrite and ns.resume_with_changes:
        raise SsftError("--overwrite starts over and --resume-with-changes continues: pass one of them")
    from ssft.api import train

    train(recipe, overwrite=ns.overwrite, resume_with_changes=ns.resume_with_changes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
