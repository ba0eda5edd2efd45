"""Pretrained checkpoints read without loss (ssft.models.interop.checkpoint): a sequence-classification model, a
ColBERT (sentence-transformers MultiVectorEncoder and Stanford's format) and a SentenceTransformer, each saved in the
test by sentence-transformers itself from a tiny random BERT (Stanford's written in its layout and loaded by
sentence-transformers), score in ssft before any training exactly as in the library; what ssft does not use is a
warning listing it; an ssft export is read back the same way (round trip)."""
from __future__ import annotations

import json
import logging
import shutil
import string
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ssft.config.recipe import ModelConfig
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError
from ssft.models.frozen import dense_reference, load_dense_model
from ssft.pipeline.export import export_run
from tests.helpers import assert_save_load_round_trip, move_trainable_weights, save_tiny_bert, write_synthetic_beir

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.base.modules import Dense, Normalize, Transformer  # noqa: E402
from sentence_transformers.multi_vector_encoder import MultiVectorEncoder  # noqa: E402
from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Pooling  # noqa: E402

QUERIES = ["what is a bone", "coffee and the heart", "iron in the diet!"]
DOCUMENTS = ["bones are hard tissue, made of calcium.", "coffee raises blood pressure a little; tea less so.",
             "red meat, beans and spinach hold iron."]
TOL = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny") / "bert")


def build(architecture: str, name: Path, method: str = "full", **model):
    cfg = ModelConfig(architecture=architecture, name=str(name), max_length=48, query_max_length=12, **model)
    return MODELS.get(architecture).build(cfg, method, {"r": 4} if "lora" in method else {}).eval()


def scores(ranker) -> torch.Tensor:
    with torch.no_grad():
        return ranker(**ranker.tokenize(QUERIES, DOCUMENTS)).float()


@pytest.fixture(scope="module")
def sequence_classification(tiny, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ce") / "ce"
    torch.manual_seed(3)
    model = st.CrossEncoder(str(tiny), num_labels=1)
    with torch.no_grad():  # a trained-looking head: the pooler and classifier away from their initial values
        for name, p in model.model.named_parameters():
            if "pooler" in name or "classifier" in name:
                p.add_(0.3 * torch.randn_like(p))
    model.save(str(folder))
    return folder


@pytest.mark.parametrize("method", ["full", "lora"])
def test_sequence_classification_checkpoint_scores_as_cross_encoder(sequence_classification, method):
    want = torch.as_tensor(st.CrossEncoder(str(sequence_classification), activation_fn=nn.Identity()).predict(
        list(zip(QUERIES, DOCUMENTS))))
    ranker = build("cross", sequence_classification, method)  # head: classifier, the default
    assert ranker.spec["head"] == "classifier"
    assert torch.allclose(scores(ranker), want, atol=TOL), (scores(ranker), want)
    assert ranker.ranks_untrained  # a trained head: its start is scored on test


def test_a_fresh_cross_encoder_head_does_not_rank_untrained(tiny):
    assert not build("cross", tiny).ranks_untrained  # a random head: no 'start' entry on test


def test_unused_head_is_a_warning_listing_it(sequence_classification, caplog):
    with caplog.at_level(logging.WARNING, logger="ssft"):
        build("cross", sequence_classification, head="cls_linear")
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "classifier.weight" in text and "bert.pooler.dense.weight" in text and "not used" in text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ssft"):
        build("cross", sequence_classification)  # classifier head: everything used, nothing reported
    assert not [r for r in caplog.records if "not used" in r.getMessage()]


def test_old_spec_without_head_loads_as_cls_linear(tiny, tmp_path):
    from ssft.models import load_ranker

    ranker = build("cross", tiny, head="cls_linear")
    ranker.save(tmp_path / "m")
    spec_file = tmp_path / "m" / "ssft_model.json"
    spec = json.loads(spec_file.read_text())
    del spec["head"]
    spec_file.write_text(json.dumps(spec))
    loaded = load_ranker(tmp_path / "m")
    assert loaded.pooler is None and torch.allclose(scores(loaded), scores(ranker), atol=1e-6)


def mve_scores(folder: Path) -> torch.Tensor:
    model = MultiVectorEncoder(str(folder))
    q, d = model.encode_query(QUERIES), model.encode_document(DOCUMENTS)
    return torch.stack([model.similarity([q[i]], [d[i]]).reshape(()) for i in range(len(QUERIES))]).float()


@pytest.mark.parametrize("attend", [True, False])
def test_multi_vector_encoder_checkpoint_scores_as_in_sentence_transformers(tiny, tmp_path, attend, caplog):
    torch.manual_seed(4)
    transformer = Transformer(str(tiny), query_length=12, document_length=48,
                              query_expansion={"strategy": "fixed", "attend": attend, "length": 12})
    model = MultiVectorEncoder(modules=[
        transformer, Dense(32, 16, bias=False, activation_function=nn.Identity(), module_input_name="token_embeddings"),
        MultiVectorMask(skiplist_words=list(string.punctuation)), Normalize(module_input_name="token_embeddings")],
        prompts={"query": "[Q] ", "document": "[D] "})
    # PyLate's markers: new special tokens (the embedding table grows), one piece each
    model.tokenizer.add_special_tokens({"additional_special_tokens": ["[Q]", "[D]"]})
    transformer.model.resize_token_embeddings(len(model.tokenizer))
    model.save(str(tmp_path / "mve"))
    want = mve_scores(tmp_path / "mve")
    ranker = build("colbert", tmp_path / "mve", colbert_dim=16)
    assert (ranker.query_marker, ranker.document_marker, ranker.attend_expansion) == ("[Q]", "[D]", attend)
    assert torch.allclose(scores(ranker), want, atol=TOL), (scores(ranker), want)
    with pytest.raises(SsftError, match="colbert_dim: 128.*set model.colbert_dim: 16"):
        build("colbert", tmp_path / "mve")
    # a recipe that says otherwise is obeyed, and the difference is said
    with caplog.at_level(logging.WARNING, logger="ssft"):
        other = build("colbert", tmp_path / "mve", colbert_dim=16, attend_expansion=not attend)
    assert other.attend_expansion is (not attend) and other.spec["attend_expansion"] is (not attend)
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert f"[MASK] expansion; model.attend_expansion is {str(not attend).lower()} (used)" in said


def test_stanford_colbert_checkpoint_keeps_its_projection(tiny, tmp_path):
    folder = tmp_path / "stanford"
    folder.mkdir()
    weights = {f"bert.{k}": v for k, v in load_file(tiny / "model.safetensors").items()}
    torch.manual_seed(5)
    weights["linear.weight"] = torch.randn(16, 32)
    save_file(weights, folder / "model.safetensors")
    config = json.loads((tiny / "config.json").read_text())
    config["architectures"] = ["HF_ColBERT"]
    (folder / "config.json").write_text(json.dumps(config))
    for f in tiny.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab")):
            (folder / f.name).write_bytes(f.read_bytes())
    (folder / "artifact.metadata").write_text(json.dumps({"query_maxlen": 12, "doc_maxlen": 48, "mask_punctuation": True,
                                                          "attend_to_mask_tokens": False}))
    want = mve_scores(folder)
    ranker = build("colbert", folder, "lora", colbert_dim=16)
    assert torch.equal(ranker.projection.weight, weights["linear.weight"])
    assert ranker.attend_expansion is False
    assert torch.allclose(scores(ranker), want, atol=TOL), (scores(ranker), want)


@pytest.mark.parametrize("normalize", [True, False])
def test_sentence_transformer_checkpoint_modules_are_honoured(tiny, tmp_path, normalize):
    torch.manual_seed(6)
    modules = [Transformer(str(tiny)), Pooling(32, "cls"), Dense(32, 24, activation_function=nn.Identity())]
    model = st.SentenceTransformer(modules=modules + ([Normalize()] if normalize else []),
                                   prompts={"query": "query: ", "document": "passage: "})
    model.save(str(tmp_path / "st"))
    loaded = st.SentenceTransformer(str(tmp_path / "st"))
    q = loaded.encode_query(QUERIES, convert_to_tensor=True)
    d = loaded.encode_document(DOCUMENTS, convert_to_tensor=True)
    want = (q * d).sum(-1) if not normalize else torch.nn.functional.cosine_similarity(q, d)
    # model.normalize left at its default (null): the folder's Normalize module, or its absence, decides
    ranker = build("dense", tmp_path / "st", pooling="cls", score_scale=1.0)
    assert ranker.spec["projection_dim"] == 24 and ranker.spec["query_prompt"] == "query: "
    assert ranker.spec["normalize"] is normalize and ranker.normalize is normalize
    assert torch.allclose(scores(ranker), want.float(), atol=TOL), (scores(ranker), want)


def test_sentence_transformer_modules_that_disagree_are_reported(tiny, tmp_path, caplog):
    model = st.SentenceTransformer(modules=[Transformer(str(tiny)), Pooling(32, "cls"), Normalize()])
    model.save(str(tmp_path / "st"))
    with caplog.at_level(logging.WARNING, logger="ssft"):
        build("dense", tmp_path / "st", normalize=False)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "pools 'cls'" in text and "Normalize" in text


@pytest.mark.parametrize("architecture,options", [("cross", {}), ("colbert", {"colbert_dim": 16}),
                                                  ("dense", {"projection_dim": 24})])
def test_an_export_is_read_back_without_loss(tiny, tmp_path, architecture, options):
    torch.manual_seed(7)
    ranker = build(architecture, tiny, "lora", **options)
    move_trainable_weights(ranker)
    ranker.save(tmp_path / "run")
    export_run(tmp_path / "run", tmp_path / "export")
    again = build(architecture, tmp_path / "export", **options)
    assert torch.allclose(scores(again), scores(ranker), atol=TOL)


def test_a_cls_linear_export_is_read_back_as_one_linear_map(tiny, tmp_path, caplog):
    torch.manual_seed(7)
    ranker = build("cross", tiny, "lora", head="cls_linear")
    move_trainable_weights(ranker)
    ranker.save(tmp_path / "run")
    export_run(tmp_path / "run", tmp_path / "export")
    with caplog.at_level(logging.WARNING, logger="ssft"):
        again = build("cross", tmp_path / "export", head="cls_linear")
    # the head folded back (w = eps x classifier), not pooler eps*I + classifier w/eps: its gradients are w's own size
    assert torch.allclose(again.head.weight, ranker.head.weight, rtol=1e-5, atol=1e-7)
    assert torch.equal(again.head.bias, ranker.head.bias)
    assert torch.allclose(scores(again), scores(ranker), atol=1e-5)
    assert again.ranks_untrained
    assert not [r for r in caplog.records if "not used" in r.getMessage()]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ssft"):
        as_classifier = build("cross", tmp_path / "export")  # head: classifier, the default: exact, but says how to train
    assert torch.allclose(scores(as_classifier), scores(ranker), atol=TOL)
    assert any("model.head: cls_linear" in r.getMessage() for r in caplog.records)


def test_a_classifier_head_is_not_taken_for_a_cls_linear_one(sequence_classification):
    ranker = build("cross", sequence_classification, head="cls_linear")  # a real pooler: nothing to fold
    assert not ranker.ranks_untrained


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> Path:
    """A second tiny random BERT, 48 wide (a heterogeneous document tower)."""
    return save_tiny_bert(tmp_path_factory.mktemp("wide") / "bert", hidden_size=48, seed=1)


def st_router_scores(folder: Path) -> torch.Tensor:
    model = st.SentenceTransformer(str(folder))
    q = model.encode_query(QUERIES, convert_to_tensor=True)
    d = model.encode_document(DOCUMENTS, convert_to_tensor=True)
    return model.similarity(q, d).diagonal().float()


def two_tower_export(tiny: Path, wide: Path, folder: Path, kind: str):
    """A trained-looking dense ranker whose towers differ, saved and exported (a Router): semi-Siamese LoRA (two
    towers merged from one base), or a 32-wide query tower beside a 48-wide document tower sharing one projection."""
    torch.manual_seed(8)
    if kind == "ss_lora":
        ranker = build("dense", tiny, "ss_lora", projection_dim=24)
    elif kind == "heterogeneous":
        ranker = build("dense", tiny, "lora", document_name=str(wide), projection_dim=16)
    else:  # dot product, no projection, two separately fine-tuned copies of one model
        ranker = build("dense", tiny, "full", document_name=str(tiny), normalize=False, score_scale=1.0)
    move_trainable_weights(ranker)
    ranker.save(folder / "run")
    export_run(folder / "run", folder / "export")
    assert (folder / "export" / "router_config.json").is_file() and not (folder / "export" / "config.json").exists()
    return ranker, folder / "export"


@pytest.mark.parametrize("kind", ["ss_lora", "heterogeneous", "dot"])
def test_a_router_export_is_read_back_as_two_towers(tiny, wide, tmp_path, kind):
    """An ssft-export Router folder as model.name of a new dense ranker: its query route is the query tower, its
    document route the document tower (model.document_name is the folder; semi-Siamese LoRA comes back as two full
    towers), the routes' Dense slices one shared projection, their Normalize the normalisation: scores equal to the
    exported ranker's and to sentence-transformers' on the same pairs; a LoRA ranker built on it saves and loads."""
    ranker, out = two_tower_export(tiny, wide, tmp_path, kind)
    scale = 1.0 if kind == "dot" else 20.0
    again = build("dense", out, score_scale=scale)  # projection_dim and normalize left null: read from the routes
    assert again.document_backbone is not None and again.spec["document_name"] == str(out)
    assert again.spec["projection_dim"] == {"ss_lora": 24, "heterogeneous": 16, "dot": None}[kind]
    assert again.normalize is (kind != "dot")
    assert again.document_backbone.config.hidden_size == (48 if kind == "heterogeneous" else 32)
    assert torch.allclose(scores(again), scores(ranker), atol=TOL), (scores(again), scores(ranker))
    assert torch.allclose(scores(again) / scale, st_router_scores(out), atol=TOL)
    lora = build("dense", out, "lora", score_scale=scale)
    assert_save_load_round_trip(lora, tmp_path / "lora", QUERIES, DOCUMENTS)  # both bases reloaded from their routes
    if kind != "dot":  # a dense distillation teacher named by the folder: the same two towers
        teacher = load_dense_model(dense_reference(str(out), max_length=48, query_max_length=12)).eval()
        assert torch.allclose(scores(teacher), scores(ranker), atol=TOL)


def test_router_route_names_follow_its_mappings(tiny, wide, tmp_path):
    """Routes named otherwise and mapped to the query / document tasks (sentence-transformers' route_mappings) are
    read as sentence-transformers resolves encode_query / encode_document."""
    ranker, out = two_tower_export(tiny, wide, tmp_path, "heterogeneous")
    config_file = out / "router_config.json"
    config = json.loads(config_file.read_text())
    config["structure"] = {"q": config["structure"]["query"], "d": config["structure"]["document"]}
    config["parameters"].update(default_route="d", route_mappings={"('query', None)": "q", "('document', None)": "d"})
    config_file.write_text(json.dumps(config))
    assert torch.allclose(st_router_scores(out) * 20.0, scores(ranker), atol=TOL)  # sentence-transformers agrees
    assert torch.allclose(scores(build("dense", out)), scores(ranker), atol=TOL)


def test_router_faults_are_one_line(tiny, wide, tmp_path):
    _, out = two_tower_export(tiny, wide, tmp_path, "heterogeneous")
    with pytest.raises(SsftError, match="only architecture dense takes both") as err:  # one encoder: refused
        build("twin", out, scorer="cosine")
    assert "\n" not in str(err.value)
    with pytest.raises(SsftError, match="a Router with separate query and document towers.*single-backbone"):
        build("dense", out, "ss_lora")
    config_file = out / "router_config.json"
    config = json.loads(config_file.read_text())
    renamed = dict(config, structure={"queries": config["structure"]["query"], "document": config["structure"]["document"]})
    config_file.write_text(json.dumps(renamed))
    with pytest.raises(SsftError, match="no 'query' route for the query tower .*did you mean 'queries'") as err:
        build("dense", out)
    assert "\n" not in str(err.value) and "router_config.json" in str(err.value)
    config_file.write_text(json.dumps(config))
    pooling = next(m for m in config["structure"]["document"] if m.endswith("Pooling"))
    shutil.rmtree(out / pooling)
    with pytest.raises(SsftError, match=f"route 'document' names module '{pooling}', which is not in") as err:
        build("dense", out)
    assert "\n" not in str(err.value)


def test_ssft_train_check_finds_a_router_folder_and_its_length_limit(tiny, wide, tmp_path, capsys):
    """`ssft-train --check` takes a Router folder as model.name (no config.json at its root) and holds the lengths to
    its towers' position embeddings (128 in both tiny BERTs)."""
    from ssft.cli.train import main

    _, out = two_tower_export(tiny, wide, tmp_path, "heterogeneous")
    recipe = tmp_path / "r.yaml"
    data = write_synthetic_beir(tmp_path / "data", queries=12, docs=10)
    recipe.write_text(f"model: {{architecture: dense, name: {out}, max_length: 64, query_max_length: 16}}\n"
                      f"data: {{dataset: {data}}}\ntraining: {{output_dir: {tmp_path / 'train'}}}\n")
    assert main(["--check", str(recipe)]) == 0
    assert "a sentence-transformers Router folder with query / document routes" in capsys.readouterr().out
    assert not (tmp_path / "train").exists()
    assert main(["--check", str(recipe), "model.max_length=200"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("ssft-train: error: ") and "model.max_length: 200" in err and "128" in err


# ---------------------------------------------------------------- foreign checkpoints: what their files tell
def half_precision_checkpoint(tiny: Path, folder: Path, dtype: torch.dtype) -> tuple[Path, Path]:
    """A random BertForSequenceClassification (one label) saved twice with save_pretrained: in float32 and in
    ``dtype`` (the same weights rounded), each beside the tiny BERT's tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    torch.manual_seed(5)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=128, num_labels=1))
    model.save_pretrained(folder / "float32")
    model.to(dtype).save_pretrained(folder / "half")
    for sub in ("float32", "half"):
        tokenizer.save_pretrained(folder / sub)
    return folder / "float32", folder / "half"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("method", ["full", "lora"])
def test_a_half_precision_sequence_classification_checkpoint_loads_in_float32(tiny, tmp_path, dtype, method):
    """A float16 / bfloat16 cross-encoder checkpoint (transformers 5 would keep its dtype, and the first scoring failed
    with a dtype mismatch) is loaded in float32: it scores as its float32 copy, and trains (a gradient step)."""
    full, half = half_precision_checkpoint(tiny, tmp_path, dtype)
    ranker = build("cross", half, method)
    assert {p.dtype for p in ranker.parameters()} == {torch.float32}
    assert torch.allclose(scores(ranker), scores(build("cross", full, method)), atol=1e-2)
    ranker.train()
    batch = ranker.tokenize(QUERIES, DOCUMENTS)
    ranker(**batch).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in ranker.parameters() if p.requires_grad)


def test_check_notes_a_half_precision_checkpoint_and_is_ready(tiny, tmp_path, capsys):
    """`ssft-train --check` on a float16 checkpoint: ready (exit 0), the plan says it loads in float32."""
    from ssft.cli.train import main

    _, half = half_precision_checkpoint(tiny, tmp_path, torch.float16)
    data = write_synthetic_beir(tmp_path / "data", queries=12, docs=10)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model: {{name: {half}, max_length: 48}}\ndata: {{dataset: {data}}}\n"
                      f"training: {{output_dir: {tmp_path / 'train'}, report_to: [tensorboard]}}\n")
    assert main(["--check", str(recipe)]) == 0
    out = capsys.readouterr().out
    assert "weights stored in float16, loaded in float32" in out and out.strip().endswith("ready to train here")
    assert not (tmp_path / "train").exists()


def with_config(source: Path, folder: Path, **changes) -> Path:
    shutil.copytree(source, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("layers", [200_000, 1])
def test_a_layer_count_the_weights_do_not_hold_is_refused_before_building(tiny, tmp_path, layers):
    """A config.json asking for layers the safetensors header does not hold (200,000 built for minutes; one layer
    fewer left weights unused) is refused from the header alone, well under a second, naming both counts."""
    import time

    from ssft.models.base import load_pretrained

    folder = with_config(tiny, tmp_path / "model", num_hidden_layers=layers)
    started = time.perf_counter()
    with pytest.raises(SsftError, match=f"num_hidden_layers is {layers}, but model.safetensors holds 2 layers") as err:
        load_pretrained(str(folder))
    assert time.perf_counter() - started < 0.5 and "\n" not in str(err.value)


def test_sharded_weights_are_read_from_every_header(tiny, tmp_path):
    """A model saved in shards (model.safetensors.index.json): every shard's header is read, the config checked
    against all of them, and a good one loads."""
    from transformers import AutoModel

    from ssft.core.hub import weights_header
    from ssft.models.base import load_pretrained

    folder = tmp_path / "sharded"
    AutoModel.from_pretrained(tiny).save_pretrained(folder, max_shard_size="400KB")
    shutil.copy(tiny / "tokenizer.json", folder)
    shutil.copy(tiny / "tokenizer_config.json", folder)
    header = weights_header(folder)
    assert len(header.files) > 1 and "encoder.layer.1.output.dense.weight" in header.shapes
    load_pretrained(str(folder))
    with_config(folder, tmp_path / "lying", intermediate_size=100)
    with pytest.raises(SsftError, match=r"intermediate.dense.weight is \[64, 32\] in model-00001-of-0000\d.safetensors … "
                                        r"\(\d shards\), config.json makes it \[100, 32\]"):
        load_pretrained(str(tmp_path / "lying"))


def test_a_tokenizer_beyond_the_model_embeddings_is_refused(tiny, tmp_path):
    """The MiniLM tokenizer (30522 ids) beside a model of 20000 token embeddings: ids past them cannot be embedded."""
    from transformers import BertConfig, BertModel

    from ssft.models.base import load_pretrained

    folder = tmp_path / "small-vocab"
    BertModel(BertConfig(vocab_size=20000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=128), add_pooling_layer=False).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny / name, folder)
    with pytest.raises(SsftError, match="its tokenizer has 30522 tokens, more than the 20000 token embeddings"):
        load_pretrained(str(folder))


def test_router_module_paths_stay_inside_the_folder(tiny, wide, tmp_path):
    """A Router whose router_config.json names a module outside its folder ('..') is refused, for the model as for
    its length limit (read by ssft-train before anything else), as sentence-transformers 6 refuses it."""
    from ssft.core.hub import max_input_length

    _, out = two_tower_export(tiny, wide, tmp_path, "heterogeneous")
    config_file = out / "router_config.json"
    config = json.loads(config_file.read_text())
    module = config["structure"]["document"][0]
    shutil.copytree(out / module, tmp_path / "elsewhere")
    config["types"]["../elsewhere"] = config["types"].pop(module)
    config["structure"]["document"][0] = "../elsewhere"
    config_file.write_text(json.dumps(config))
    for call in (lambda: build("dense", out), lambda: max_input_length(str(out))):
        with pytest.raises(SsftError, match="router_config.json: module path '../elsewhere' leaves the model folder"):
            call()
