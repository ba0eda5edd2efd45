"""The bad-input matrix: recipe values and overrides. Case format: see tests/bad_inputs/cases_base.py."""
from __future__ import annotations

from tests.bad_inputs.world import World, _train  # noqa: F401  (the argv builders)

# a "billion laughs" section: 9 levels of 10 aliases each, a few hundred bytes that expand to 10**9 values
_ALIAS_BOMB = "callbacks:\n  - &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  - &{name} [{', '.join([f'*{prev}'] * 10)}]\n" for prev, name in zip("abcdefgh", "bcdefghi"))


def _recipe_edited(w: World, old: str, new: str, *overrides: str) -> list[str]:
    """The world's recipe with ``old`` replaced by ``new`` (in its own file: the culprit names it)."""
    text = w.recipe().read_text()
    assert old in text
    return [str(w.file("edited.yaml", text.replace(old, new))), *overrides]


def _grid(w: World, text: str) -> list[str]:
    w.recipe()
    return [str(w.grid(text))]


CASES: list[tuple] = [
    # ---- duplicate keys: YAML keeps the last one silently (adapter given twice became full fine-tuning)
    ("recipe-duplicate-section", "ssft.cli.train", lambda w: _train(w, extra="adapter: full\n"),
     "recipe.yaml:6: adapter: duplicate key (first given on line 2)"),
    ("recipe-duplicate-nested-key", "ssft.cli.train",
     lambda w: _recipe_edited(w, "max_length: 48", "max_length: 48, max_length: 64"),
     "edited.yaml:1: model.max_length: duplicate key"),
    ("recipe-duplicate-key-in-override", "ssft.cli.train", lambda w: _train(w, "adapter={method: lora, method: full}"),
     "adapter.method: duplicate key"),
    ("sweep-grid-duplicate-key", "ssft.cli.sweep",
     lambda w: _grid(w, "recipe: recipe.yaml\noutput_root: OUT\ngrid: {seed: [1, 2]}\ngrid: {seed: [3]}\n"),
     "grid.yaml:4: grid: duplicate key (first given on line 3)"),
    ("sweep-grid-duplicate-nested-key", "ssft.cli.sweep",
     lambda w: _grid(w, "recipe: recipe.yaml\noutput_root: OUT\ngrid:\n  seed: [1, 2]\n  seed: [3]\n"),
     "grid.yaml:5: grid.seed: duplicate key"),
    # ---- aliases: a 400-byte file that expands to 10**9 values, and one that contains itself
    ("recipe-alias-bomb", "ssft.cli.train", lambda w: _train(w, extra=_ALIAS_BOMB), "expands to more than 100,000 values"),
    ("recipe-alias-recursive", "ssft.cli.train", lambda w: _train(w, extra="callbacks: &loop [*loop]\n"),
     "callbacks[0]: a YAML alias (*name) refers to a value that contains it"),
    ("sweep-grid-alias-bomb", "ssft.cli.sweep",
     lambda w: _grid(w, "recipe: recipe.yaml\noutput_root: OUT\nvariants:\n" + _ALIAS_BOMB[11:]),
     "expands to more than 100,000 values"),
    # ---- the output folder: key==value wrote to ./=value; an empty folder name
    ("recipe-override-double-equals", "ssft.cli.train", lambda w: _train(w, "training.output_dir==elsewhere"),
     "did you mean training.output_dir=elsewhere?"),
    ("recipe-output-dir-empty", "ssft.cli.train", lambda w: _train(w, "training.output_dir=''"),
     "training.output_dir: expected a folder path, got ''"),
    ("recipe-output-dir-null", "ssft.cli.train", lambda w: _train(w, "training.output_dir="),
     "training.output_dir: expected a folder path, got None"),
    # ---- sizes and counts
    ("recipe-batch-size-zero", "ssft.cli.train", lambda w: _train(w, "training.per_device_train_batch_size=0"),
     "training.per_device_train_batch_size: must be >= 1, got 0"),
    ("recipe-batch-size-negative", "ssft.cli.train", lambda w: _train(w, "training.per_device_train_batch_size=-1"),
     "training.per_device_train_batch_size: must be >= 1, got -1"),
    ("recipe-eval-device-batch-size-zero", "ssft.cli.train", lambda w: _train(w, "training.per_device_eval_batch_size=0"),
     "training.per_device_eval_batch_size: must be >= 1"),
    ("recipe-accumulation-zero", "ssft.cli.train", lambda w: _train(w, "training.gradient_accumulation_steps=0"),
     "training.gradient_accumulation_steps: must be >= 1"),
    ("recipe-eval-batch-size-zero", "ssft.cli.train", lambda w: _train(w, "eval.batch_size=0"),
     "eval.batch_size: must be >= 1, got 0"),
    ("recipe-eval-precision-unknown", "ssft.cli.train", lambda w: _train(w, "eval.precision=fp16"),
     "eval.precision: expected one of auto, fp32, bf16, int8, got 'fp16'"),
    ("recipe-epochs-nan", "ssft.cli.train", lambda w: _train(w, "training.num_train_epochs=nan"),
     "training.num_train_epochs: expected a finite number"),
    ("recipe-epochs-negative", "ssft.cli.train", lambda w: _train(w, "training.num_train_epochs=-2"),
     "training.num_train_epochs: must be >= 0"),
    ("recipe-max-steps-zero", "ssft.cli.train", lambda w: _train(w, "training.max_steps=0"),
     "training.max_steps: must be >= 1, or -1"),
    # ---- learning rates and the scheduler
    ("recipe-lr-nan", "ssft.cli.train", lambda w: _train(w, "training.learning_rate=nan"),
     "training.learning_rate: expected a finite number"),
    ("recipe-lr-inf", "ssft.cli.train", lambda w: _train(w, "training.learning_rate=.inf"),
     "training.learning_rate: expected a finite number"),
    ("recipe-lr-negative", "ssft.cli.train", lambda w: _train(w, "training.learning_rate=-1"),
     "training.learning_rate: must be >= 0, got -1.0"),
    ("recipe-head-lr-nan", "ssft.cli.train", lambda w: _train(w, "model.head_learning_rate=.nan"),
     "model.head_learning_rate: expected a finite number"),
    ("recipe-head-lr-negative", "ssft.cli.train", lambda w: _train(w, "model.head_learning_rate=-1e-3"),
     "model.head_learning_rate: must be >= 0"),
    ("recipe-scheduler-kwargs-unknown", "ssft.cli.train",
     lambda w: _train(w, "training.lr_scheduler_type=cosine", "training.lr_scheduler_kwargs={num_cycle: 2}"),
     "training.lr_scheduler_kwargs: 'num_cycle' is not an argument of lr_scheduler_type 'cosine' (did you mean 'num_cycles'?)"),
    ("recipe-scheduler-kwargs-not-mapping", "ssft.cli.train", lambda w: _train(w, "training.lr_scheduler_kwargs=[1, 2]"),
     "training.lr_scheduler_kwargs: expected a mapping"),
    ("recipe-scheduler-kwargs-bad-value", "ssft.cli.train",
     lambda w: _train(w, "training.lr_scheduler_type=cosine", "training.lr_scheduler_kwargs={num_cycles: many}"),
     "lr_scheduler_type 'cosine' does not accept"),
    ("recipe-scheduler-kwargs-ignored", "ssft.cli.train",
     lambda w: _train(w, "training.lr_scheduler_type=constant", "training.lr_scheduler_kwargs={num_cycles: 2}"),
     "lr_scheduler_type 'constant' takes no arguments"),
    # ---- seeds and other numbers
    ("recipe-seed-negative", "ssft.cli.train", lambda w: _train(w, "seed=-1"), "seed: must be in [0, 2**32), got -1"),
    ("recipe-seed-too-large", "ssft.cli.train", lambda w: _train(w, f"seed={2 ** 32}"),
     "seed: must be in [0, 2**32), got 4294967296"),
    ("recipe-sample-seed-negative", "ssft.cli.train", lambda w: _train(w, "data.sample_seed=-5"),
     "data.sample_seed: must be in [0, 2**32)"),
    ("recipe-score-scale-inf", "ssft.cli.train", lambda w: _train(w, "model.score_scale=.inf"),
     "model.score_scale: expected a finite number"),
    # ---- lengths beyond the model's position embeddings (the tiny BERT has 128)
    ("recipe-max-length-beyond-model", "ssft.cli.train", lambda w: _train(w, "model.max_length=100000"),
     "model.max_length: 100000 is beyond what model.name"),
    ("recipe-query-max-length-beyond-model", "ssft.cli.train", lambda w: _train(w, "model.query_max_length=129"),
     "model.query_max_length: 129 is beyond what model.name"),
    # a model key that only another architecture reads would change nothing
    ("train-model-key-of-another-architecture", "ssft.cli.train", lambda w: _train(w, "model.colbert_dim=64"),
     "model.colbert_dim: only for model.architecture 'colbert', not 'cross'"),
    ("train-twin-scorer-on-dense", "ssft.cli.train", lambda w: _train(w, "model.architecture=dense", "model.scorer=dot"),
     "model.scorer: only for model.architecture 'twin', not 'dense'"),
    # ---- 004's CE parts: the reconstruction loss needs a dual-pooled cross-encoder; dual pooling, generated
    # queries and a cross-encoder teacher's query-only training are checked before anything is written
    ("train-reconstruction-without-dual-pooling", "ssft.cli.train", lambda w: _train(w, "loss.reconstruction_weight=0.1"),
     "loss.reconstruction_weight: the token reconstruction loss (004 §4.2) trains a model.architecture 'cross' with "
     "model.head 'dual_pooled', not 'cross' with head 'classifier'"),
    ("train-dual-pooling-unknown", "ssft.cli.train",
     lambda w: _train(w, "model.head=dual_pooled", "model.dual_pooling=mean"),
     "model.dual_pooling: expected cls_sep or segment_mean, got 'mean'"),
    ("train-generated-queries-bad-sigma", "ssft.cli.train",
     lambda w: _train(w, "model.architecture=dense", "adapter=full", f"distillation.teacher={w.model}",
                      f"distillation.generated_queries={{model: {w.model}, sigma: -1}}"),
     "distillation.generated_queries.sigma: must be >= 0, got -1"),
    ("train-generated-queries-not-seq2seq", "ssft.cli.train",
     lambda w: _train(w, "model.architecture=dense", "adapter=full", f"distillation.teacher={w.model}",
                      "distillation.inherit_documents=true", f"distillation.generated_queries={{model: {w.model}}}"),
     "is a 'bert' model, not an encoder-decoder (seq2seq) model"),
    ("train-cross-teacher-query-only", "ssft.cli.train",
     lambda w: _train(w, "model.architecture=dense", "adapter=full", f"distillation.teacher={w.model}",
                      "distillation.teacher_kind=cross_dual_pooled", "distillation.teacher_pooling=cls_sep",
                      "distillation.inherit_documents=true", "distillation.query_only=true"),
     "distillation.query_only: a cross-encoder teacher's query embedding depends on the document"),
    # ---- ssft-train --check on a dataset that is nowhere; a fold file beside a random-split seed
    ("train-check-dataset-missing", "ssft.cli.train", lambda w: ["--check", *_train(w, f"data.dataset={w.root / 'nodata'}")],
     "data.dataset"),
    ("sweep-folds-file-and-seed", "ssft.cli.sweep",
     lambda w: _grid(w, "recipe: recipe.yaml\noutput_root: OUT\nfolds: {file: f.txt, seed: 1}\n"),
     "seed draws a random split, file names published folds"),
]
