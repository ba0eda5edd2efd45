"""The bad-input matrix: damaged checkpoints and model folders. Case format: see tests/bad_inputs/cases_base.py.

The checkpoint cases resume from a real checkpoint (every file the Trainer writes: optimizer.pt, scheduler.pt,
trainer_state.json, rng_state.pth, ssft's marker and ranker/, the best-epoch state), trained once per test session
with the world's tiny model and data and copied into each world's output folder, then damaged one file at a time."""
from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path

from tests.bad_inputs.world import World, _train, _truncate  # noqa: F401  (the argv builders)

_SOURCE: dict[str, Path] = {}  # "checkpoint": the trained checkpoint every checkpoint case copies


def _trained_checkpoint(w: World) -> Path:
    """A complete checkpoint of a one-epoch run of the world's recipe (LoRA cross-encoder on the tiny BERT), trained
    once (a few seconds) outside every world and kept for the session."""
    if "checkpoint" not in _SOURCE:
        from tests.cli_runner import run_cli

        root = Path(tempfile.mkdtemp(prefix="ssft-checkpoint-source-"))
        atexit.register(shutil.rmtree, root, True)
        for sub in ("cwd", "home", "cache"):
            (root / sub).mkdir()
        shutil.copytree(w.data, root / "data")
        recipe = root / "recipe.yaml"
        recipe.write_text(f"model: {{name: {w.model}, max_length: 48}}\nadapter: {{method: lora, r: 4}}\n"
                          f"data: {{dataset: {root / 'data'}, num_negatives: 2, negatives_depth: 6}}\neval: {{depth: 6}}\n"
                          f"training: {{output_dir: {root / 'run'}, num_train_epochs: 1, per_device_train_batch_size: 2, "
                          f"save_strategy: epoch}}\n")
        result = run_cli("ssft.cli.train", [str(recipe)], cwd=root / "cwd",
                         env={"HOME": root / "home", "SSFT_CACHE": root / "cache", "HF_HUB_OFFLINE": "1",
                              "SSFT_DATA_HOME": root / "cache" / "no-data-home"})
        found = sorted((root / "run").glob("checkpoint-*"))
        assert result.returncode == 0 and found, result.stderr[-3000:]
        _SOURCE["checkpoint"] = found[-1]
    return _SOURCE["checkpoint"]


def _resumable(w: World) -> tuple[Path, list[str]]:
    """The world's output folder holding a complete checkpoint of the world's own recipe (so ssft-train resumes
    from it): (the checkpoint folder, the argv)."""
    import yaml

    from ssft.config.recipe import load_recipe

    source = _trained_checkpoint(w)
    recipe = w.recipe()
    checkpoint = w.out / source.name
    w.out.mkdir(parents=True)
    shutil.copytree(source, checkpoint)
    (w.out / "recipe.yaml").write_text(yaml.safe_dump(load_recipe(recipe).to_dict(), sort_keys=False))
    return checkpoint, [str(recipe)]


def _damaged(name: str, how: str):
    """An argv builder: the world's resumable checkpoint with its file ``name`` truncated, overwritten with garbage,
    removed, or (``pickled-object``) a valid torch file holding a pickled object other than plain state."""

    def build(w: World) -> list[str]:
        checkpoint, argv = _resumable(w)
        path = checkpoint / name
        if how == "truncated":
            _truncate(path)
        elif how == "garbage":
            path.write_bytes(b"\x00\x01 this is not a checkpoint file \xff" * 8)
        elif how == "missing":
            path.unlink()
        elif how == "pickled-object":
            import torch

            torch.save({"python": Path("/etc/passwd"), "numpy": None, "cpu": torch.zeros(2, dtype=torch.uint8)}, path)
        elif how == "wrong-shape":
            path.write_text('{"global_step": "four", "loss_sum": 1.0}\n')
        else:
            raise ValueError(how)
        return argv

    return build


def _checkpoint_pickle_adapter(w: World) -> list[str]:
    import torch
    from safetensors.torch import load_file

    checkpoint, argv = _resumable(w)
    adapter = checkpoint / "ranker" / "adapter"
    torch.save(load_file(adapter / "adapter_model.safetensors"), adapter / "adapter_model.bin")
    (adapter / "adapter_model.safetensors").unlink()
    return argv


def _pickle_base_model(w: World) -> list[str]:
    import torch
    from safetensors.torch import load_file

    model = w.root / "pickle-model"
    shutil.copytree(w.model, model)
    torch.save(load_file(model / "model.safetensors"), model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    return _train(w, f"model.name={model}")


def _rerank_pickle_backbone(w: World) -> list[str]:
    """A saved full fine-tuned cross-encoder whose backbone/ holds pytorch_model.bin only."""
    import torch
    from safetensors.torch import load_file

    from ssft.config.recipe import ModelConfig
    from ssft.models.cross import CrossEncoder

    shutil.rmtree(w.ranker)
    CrossEncoder.build(ModelConfig(name=str(w.model), max_length=48), "full", {}).save(w.ranker)
    backbone = w.ranker / "backbone"
    torch.save(load_file(backbone / "model.safetensors"), backbone / "pytorch_model.bin")
    (backbone / "model.safetensors").unlink()
    return w.rerank()


def _rerank_pickle_adapter(w: World) -> list[str]:
    import torch
    from safetensors.torch import load_file

    adapter = w.ranker / "adapter"
    torch.save(load_file(adapter / "adapter_model.safetensors"), adapter / "adapter_model.bin")
    (adapter / "adapter_model.safetensors").unlink()
    return w.rerank()


def _rerank_adapter_on_other_base(w: World) -> list[str]:
    """The LoRA adapter (saved on the hidden-32 tiny BERT) with a spec naming a hidden-64 one."""
    from tests.helpers import save_tiny_bert

    wide = save_tiny_bert(w.root / "wide-bert", hidden_size=64, layers=2, seed=0)
    spec = json.loads((w.ranker / "ssft_model.json").read_text())
    spec["base_model"] = str(wide)
    (w.ranker / "ssft_model.json").write_text(json.dumps(spec, indent=2))
    return w.rerank()


def _rerank_trust_remote_code(w: World) -> list[str]:
    spec = json.loads((w.ranker / "ssft_model.json").read_text())
    spec["trust_remote_code"] = True
    (w.ranker / "ssft_model.json").write_text(json.dumps(spec, indent=2))
    return w.rerank()


CASES: list[tuple] = [
    # ---- resuming from a damaged checkpoint (every file the resume reads)
    ("train-resume-optimizer-truncated", "ssft.cli.train", _damaged("optimizer.pt", "truncated"),
     "checkpoint-2/optimizer.pt: damaged (truncated", "out-may-change"),
    ("train-resume-optimizer-missing", "ssft.cli.train", _damaged("optimizer.pt", "missing"),
     "checkpoint-2/optimizer.pt: missing; delete", "out-may-change"),
    ("train-resume-scheduler-garbage", "ssft.cli.train", _damaged("scheduler.pt", "garbage"),
     "checkpoint-2/scheduler.pt: damaged (truncated, or not a file torch.save wrote); delete", "out-may-change"),
    ("train-resume-trainer-state-truncated", "ssft.cli.train", _damaged("trainer_state.json", "truncated"),
     "checkpoint-2/trainer_state.json: damaged (invalid JSON", "out-may-change"),
    ("train-resume-trainer-state-missing", "ssft.cli.train", _damaged("trainer_state.json", "missing"),
     "checkpoint-2/trainer_state.json: missing", "out-may-change"),
    ("train-resume-rng-state-garbage", "ssft.cli.train", _damaged("rng_state.pth", "garbage"),
     "checkpoint-2/rng_state.pth: damaged (truncated, or not a file torch.save wrote); delete", "out-may-change"),
    ("train-resume-rng-state-pickled-object", "ssft.cli.train", _damaged("rng_state.pth", "pickled-object"),
     "checkpoint-2/rng_state.pth: damaged (holds pickled objects other than plain state", "out-may-change"),
    ("train-resume-marker-garbage", "ssft.cli.train", _damaged("ssft_checkpoint.json", "garbage"),
     "checkpoint-2/ssft_checkpoint.json: damaged (not a UTF-8 text file)", "out-may-change"),
    ("train-resume-marker-wrong-shape", "ssft.cli.train", _damaged("ssft_checkpoint.json", "wrong-shape"),
     "checkpoint-2/ssft_checkpoint.json: damaged (expected", "out-may-change"),
    ("train-resume-best-epoch-snapshot-truncated", "ssft.cli.train", _damaged("best_epoch.safetensors", "truncated"),
     "checkpoint-2/best_epoch.safetensors: damaged (incomplete metadata", "out-may-change"),
    ("train-resume-best-epoch-json-truncated", "ssft.cli.train", _damaged("best_epoch.json", "truncated"),
     "checkpoint-2/best_epoch.json: damaged (invalid JSON", "out-may-change"),
    ("train-resume-best-epoch-json-missing", "ssft.cli.train", _damaged("best_epoch.json", "missing"),
     "checkpoint-2/best_epoch.json: missing; delete", "out-may-change"),
    ("train-resume-ranker-pickle-adapter", "ssft.cli.train", _checkpoint_pickle_adapter,
     "checkpoint-2/ranker: the saved model cannot be loaded (adapter/adapter_model.bin: pickle weights are not loaded); "
     "delete", "out-may-change"),
    # ---- pickle weights are never loaded
    ("train-model-pickle-weights", "ssft.cli.train", _pickle_base_model,
     "pickle-model/pytorch_model.bin: pickle weights are not loaded; convert to safetensors"),
    ("rerank-backbone-pickle-weights", "ssft.cli.rerank", _rerank_pickle_backbone,
     "backbone/pytorch_model.bin: pickle weights are not loaded; convert to safetensors"),
    ("rerank-adapter-pickle-weights", "ssft.cli.rerank", _rerank_pickle_adapter,
     "adapter/adapter_model.bin: pickle weights are not loaded; convert to safetensors"),
    # ---- a model folder that does not fit, or asks to run its code
    ("rerank-adapter-other-base-model", "ssft.cli.rerank", _rerank_adapter_on_other_base,
     "adapter: the adapter does not fit base model"),
    ("rerank-spec-trust-remote-code", "ssft.cli.rerank", _rerank_trust_remote_code,
     "ssft_model.json: this model was saved with trust_remote_code; pass --trust-remote-code"),
]


# ---- foreign checkpoints: a model folder whose parts do not fit together, read before any weight is loaded
def _model_copy(w: World, name: str, keep: tuple[str, ...] | None = None, **config) -> Path:
    """A copy of the world's tiny BERT (only the files ``keep`` names, when given) with ``config`` written into its
    config.json."""
    model = w.root / name
    shutil.copytree(w.model, model)
    if keep is not None:
        for path in model.iterdir():
            if path.name not in keep:
                path.unlink()
    if config:
        data = json.loads((model / "config.json").read_text())
        data.update(config)
        (model / "config.json").write_text(json.dumps(data))
    return model


def _foreign(name: str, *overrides: str, check: bool = False, keep: tuple[str, ...] | None = None, **config):
    """An argv builder: train (or ``--check``) the world's recipe on a copy of its model changed as ``_model_copy``
    says."""
    def build(w: World) -> list[str]:
        model = _model_copy(w, name, keep, **config)
        return (["--check"] if check else []) + _train(w, f"model.name={model}", *overrides)
    return build


def _small_tokenizer(check: bool):
    """The tiny BERT with a 100-word tokenizer of its own (another model's, far smaller than its 30522 embeddings)."""
    def build(w: World) -> list[str]:
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        model = _model_copy(w, "small-tokenizer", keep=("config.json", "model.safetensors"))
        vocab = {word: i for i, word in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                                  + [f"w{i}" for i in range(95)])}
        tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                sep_token="[SEP]", mask_token="[MASK]").save_pretrained(model)
        return (["--check"] if check else []) + _train(w, f"model.name={model}")
    return build


def _st_folder_escaping(path: str, check: bool = False):
    """A sentence-transformers folder whose modules.json sends its Transformer module to ``path`` (outside it)."""
    def build(w: World) -> list[str]:
        shutil.copytree(w.model, w.root / "outside-module")
        st_folder = w.root / "st-model"
        shutil.copytree(w.model, st_folder)
        (st_folder / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "0", "path": path.replace("ROOT", str(w.root)),
             "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
        (st_folder / "1_Pooling").mkdir()
        (st_folder / "1_Pooling" / "config.json").write_text('{"word_embedding_dimension": 32, '
                                                             '"pooling_mode_mean_tokens": true}')
        return (["--check"] if check else []) + _train(w, f"model.name={st_folder}", "model.architecture=dense",
                                                       "loss.name=contrastive")
    return build


def _sequence_classification(name: str, labels: int, dtype: str = "float32"):
    """A BertForSequenceClassification with ``labels`` labels saved in ``dtype`` beside the tiny BERT's tokenizer."""
    def make(w: World) -> Path:
        import torch
        from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

        folder = w.root / name
        tokenizer = AutoTokenizer.from_pretrained(w.model)
        torch.manual_seed(1)
        config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=128, num_labels=labels)
        BertForSequenceClassification(config).to(getattr(torch, dtype)).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return folder
    return make


FOREIGN_CASES: list[tuple] = [
    # a model folder without tokenizer files (transformers would build a 5-token tokenizer and train on [UNK])
    ("train-model-without-tokenizer-files", "ssft.cli.train",
     _foreign("no-tokenizer", keep=("config.json", "model.safetensors")),
     "no-tokenizer has no tokenizer files"),
    # the model's files are checked before any data work: a broken training split is never reached
    ("train-model-checked-before-the-data", "ssft.cli.train",
     _foreign("no-tokenizer", "data.train_split=nosuchsplit", keep=("config.json", "model.safetensors")),
     "no-tokenizer has no tokenizer files"),
    ("train-model-tokenizer-far-smaller-than-vocabulary", "ssft.cli.train", _small_tokenizer(check=False),
     "its tokenizer has 100 tokens, far fewer than the 30522"),
    # a config.json that does not describe the weights beside it
    ("train-config-lies-about-hidden-size", "ssft.cli.train", _foreign("lying-hidden", hidden_size=64),
     "embeddings.word_embeddings.weight is [30522, 32] in model.safetensors, config.json makes it [30522, 64]"),
    ("train-config-lies-about-vocabulary", "ssft.cli.train", _foreign("lying-vocab", vocab_size=50000),
     "embeddings.word_embeddings.weight is [30522, 32] in model.safetensors, config.json makes it [50000, 32]"),
    ("train-config-lies-about-intermediate-size", "ssft.cli.train", _foreign("lying-intermediate", intermediate_size=200),
     "encoder.layer.0.intermediate.dense.weight is [64, 32] in model.safetensors, config.json makes it [200, 32]"),
    ("train-config-lies-about-positions", "ssft.cli.train", _foreign("lying-positions", max_position_embeddings=512),
     "embeddings.position_embeddings.weight is [128, 32] in model.safetensors, config.json makes it [512, 32]"),
    ("train-config-absurd-layer-count", "ssft.cli.train", _foreign("absurd-layers", num_hidden_layers=200000),
     "config.json: num_hidden_layers is 200000, but model.safetensors holds 2 layers"),
    ("train-config-one-layer-more", "ssft.cli.train", _foreign("three-layers", num_hidden_layers=3),
     "config.json: num_hidden_layers is 3, but model.safetensors holds 2 layers"),
    # modules.json may only name folders inside the model folder (as sentence-transformers 6.2 requires)
    ("train-modules-json-parent-path", "ssft.cli.train", _st_folder_escaping("../outside-module"),
     "modules.json: module path '../outside-module' leaves the model folder"),
    ("train-modules-json-absolute-path", "ssft.cli.train", _st_folder_escaping("ROOT/outside-module"),
     "outside-module' leaves the model folder"),
    # ---- ssft-train --check: what config.json, the tokenizer files and the safetensors header tell, no weights loaded
    ("train-check-model-without-tokenizer-files", "ssft.cli.train",
     _foreign("no-tokenizer", check=True, keep=("config.json", "model.safetensors")),
     "no-tokenizer has no tokenizer files"),
    ("train-check-tokenizer-far-smaller-than-vocabulary", "ssft.cli.train", _small_tokenizer(check=True),
     "its tokenizer has 100 tokens, far fewer than the 30522"),
    ("train-check-config-lies-about-intermediate-size", "ssft.cli.train",
     _foreign("lying-intermediate", check=True, intermediate_size=200),
     "encoder.layer.0.intermediate.dense.weight is [64, 32] in model.safetensors, config.json makes it [200, 32]"),
    ("train-check-config-absurd-layer-count", "ssft.cli.train", _foreign("absurd-layers", check=True, num_hidden_layers=200000),
     "config.json: num_hidden_layers is 200000, but model.safetensors holds 2 layers"),
    ("train-check-modules-json-parent-path", "ssft.cli.train", _st_folder_escaping("../outside-module", check=True),
     "modules.json: module path '../outside-module' leaves the model folder"),
    ("train-check-two-label-checkpoint", "ssft.cli.train",
     lambda w: ["--check", *_train(w, f"model.name={_sequence_classification('two-labels', 2)(w)}")],
     "two-labels: its classifier has 2 labels; a ranking cross-encoder has one"),
    ("train-check-report-to-not-installed", "ssft.cli.train", lambda w: ["--check", *_train(w, "training.report_to=[wandb]")],
     "training.report_to: 'wandb' is not installed"),
    ("train-report-to-not-installed", "ssft.cli.train", lambda w: _train(w, "training.report_to=wandb"),
     "training.report_to: 'wandb' is not installed"),
    ("train-report-to-unknown", "ssft.cli.train", lambda w: _train(w, "training.report_to=[tensorboard, wandbb]"),
     "training.report_to: unknown integration 'wandbb' (did you mean 'wandb'?)"),
    # a saved ssft model whose tokenizer.json was lost (its tokenizer_config.json alone builds a stub of 5 tokens)
    ("rerank-saved-model-without-tokenizer-file", "ssft.cli.rerank",
     lambda w: ((w.ranker / "tokenizer.json").unlink(), w.rerank())[1],
     "its tokenizer has 5 tokens, far fewer than the 30522 token embeddings"),
    ("train-check-not-ready", "ssft.cli.train", lambda w: ["--check", *_train(w, "model.name=someone/not-in-the-cache")],
     "not ready to train here: model.name 'someone/not-in-the-cache'"),
]
CASES += FOREIGN_CASES
