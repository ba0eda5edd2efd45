"""ssft-export: every architecture x exportable method, written by ssft and loaded by the real client
(sentence-transformers 6.2's CrossEncoder / SentenceTransformer / MultiVectorEncoder, transformers'
AutoModelForSequenceClassification), scores the same (query, document) pairs as ssft within 1e-4; refused exports are
one line and write nothing; an export over an existing folder is never half-written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ssft.config.recipe import ModelConfig
from ssft.config.registry import MODELS
from ssft.core.errors import SsftError
from ssft.models import load_ranker
from ssft.pipeline.export import export_run
from tests.helpers import move_trainable_weights, save_tiny_bert

st = pytest.importorskip("sentence_transformers")

QUERIES = ["what is a bone", "coffee and the heart", "iron in the diet!"]
DOCUMENTS = ["bones are hard tissue, made of calcium.", "coffee raises blood pressure a little; tea less so.",
             "red meat, beans and spinach hold iron. " + " ".join(["a long document cut at max_length:"] * 30)]
METHODS = ["full", "lora", "lora++", "ss_lora"]
TOL = 1e-4


@pytest.fixture(scope="module")
def towers(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("towers")
    return save_tiny_bert(root / "a", seed=0), save_tiny_bert(root / "b", hidden_size=48, seed=1)


def trained(architecture: str, method: str, base: Path, folder: Path, **model) -> Path:
    """A ranker whose every trainable weight moved off its start (so a weight lost in export would show), saved."""
    torch.manual_seed(0)
    cfg = ModelConfig(architecture=architecture, name=str(base), max_length=48, query_max_length=12, **model)
    ranker = MODELS.get(architecture).build(cfg, method, {"r": 4} if "lora" in method else {})
    move_trainable_weights(ranker)
    ranker.save(folder)
    return folder


def ssft_scores(folder: Path) -> torch.Tensor:
    ranker = load_ranker(folder)
    with torch.no_grad():
        return ranker(**ranker.tokenize(QUERIES, DOCUMENTS)).float()


def exported(folder: Path, out: Path, **kwargs) -> Path:
    export_run(folder, out, **kwargs)
    return out


@pytest.mark.parametrize("method,head", [("full", "classifier"), ("lora", "classifier"), ("lora++", "classifier"),
                                         ("lora", "cls_linear")])  # cls_linear: the stated approximation
def test_cross_encoder_export_scores_as_ssft(towers, tmp_path, method, head):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    folder = trained("cross", method, towers[0], tmp_path / "model", head=head)
    want = ssft_scores(folder)
    out = exported(folder, tmp_path / "export")
    config = json.loads((out / "config.json").read_text())
    assert config["num_labels"] == 1 if "num_labels" in config else len(config["id2label"]) == 1
    got = torch.as_tensor(st.CrossEncoder(str(out)).predict(list(zip(QUERIES, DOCUMENTS))))  # identity activation
    assert torch.allclose(got, want, atol=TOL), (got, want)
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():  # the export's tokenizer truncates at the model's max_length by itself
        logits = model(**tokenizer(QUERIES, DOCUMENTS, padding=True, truncation="longest_first",
                                   return_tensors="pt")).logits.squeeze(-1)
    assert torch.allclose(logits, want, atol=TOL)
    scores = pipeline("text-classification", model=str(out), function_to_apply="none")(
        {"text": QUERIES[0], "text_pair": DOCUMENTS[0]})
    score = scores["score"] if isinstance(scores, dict) else scores[0]["score"]
    assert abs(score - float(want[0])) < TOL
    readme = (out / "README.md").read_text()
    assert "ssft" in readme and method in readme and "CrossEncoder" in readme


def st_scores(out: Path) -> torch.Tensor:
    model = st.SentenceTransformer(str(out))
    q = model.encode_query(QUERIES, convert_to_tensor=True)
    d = model.encode_document(DOCUMENTS, convert_to_tensor=True)
    return model.similarity(q, d).diagonal().float()


@pytest.mark.parametrize("method", METHODS)
def test_twin_export_scores_as_ssft(towers, tmp_path, method):
    folder = trained("twin", method, towers[0], tmp_path / "model", scorer="cosine", pooling="cls")
    want = ssft_scores(folder)
    out = exported(folder, tmp_path / "export")
    assert (out / "router_config.json").is_file() == (method == "ss_lora")  # two merged towers: a Router
    assert torch.allclose(st_scores(out), want, atol=TOL)


def test_ss_lora_with_shared_modules_exports_two_merged_towers(towers, tmp_path):
    """Shared LoRA on every linear layer, tower-specific LoRA on W^v: each exported tower merges both."""
    torch.manual_seed(0)
    cfg = ModelConfig(architecture="dense", name=str(towers[0]), max_length=48, query_max_length=12)
    ranker = MODELS.get("dense").build(cfg, "ss_lora", {"r": 4, "shared_modules": [
        "attention.self.key", "output.dense", "intermediate.dense"]})
    move_trainable_weights(ranker)
    folder = tmp_path / "model"
    ranker.save(folder)
    out = exported(folder, tmp_path / "export")
    assert (out / "router_config.json").is_file()
    assert torch.allclose(st_scores(out), ssft_scores(folder) / 20.0, atol=TOL)


@pytest.mark.parametrize("method", METHODS)
def test_dense_export_scores_as_ssft(towers, tmp_path, method):
    folder = trained("dense", method, towers[0], tmp_path / "model", projection_dim=24)
    want = ssft_scores(folder) / 20.0  # score_scale: a constant factor of the cosine
    assert torch.allclose(st_scores(exported(folder, tmp_path / "export")), want, atol=TOL)


def test_dense_dot_product_and_heterogeneous_towers_export(towers, tmp_path):
    folder = trained("dense", "full", towers[0], tmp_path / "dot", normalize=False, score_scale=1.0)
    out = exported(folder, tmp_path / "dot-export")
    assert json.loads((out / "config_sentence_transformers.json").read_text())["similarity_fn_name"] == "dot"
    assert torch.allclose(st_scores(out), ssft_scores(folder), atol=TOL)
    # a 32-wide query tower and a 48-wide document tower sharing one projection (the narrower one zero-padded)
    folder = trained("dense", "lora", towers[0], tmp_path / "hetero", document_name=str(towers[1]), projection_dim=16)
    out = exported(folder, tmp_path / "hetero-export")
    assert (out / "router_config.json").is_file()
    assert torch.allclose(st_scores(out), ssft_scores(folder) / 20.0, atol=TOL)


@pytest.mark.parametrize("method,expansion", [(m, {}) for m in METHODS] + [
    ("lora", {"attend_expansion": True}), ("lora", {"query_expansion": False}),
    ("lora", {"query_expansion": False, "markers": False}),
    ("ss_lora", {"query_expansion": False, "markers": False})])
def test_colbert_export_scores_as_ssft(towers, tmp_path, method, expansion):
    from sentence_transformers import MultiVectorEncoder

    folder = trained("colbert", method, towers[0], tmp_path / "model", colbert_dim=16, **expansion)
    want = ssft_scores(folder)
    out = exported(folder, tmp_path / "export")
    model = MultiVectorEncoder(str(out))
    q = model.encode_query(QUERIES)
    d = model.encode_document(DOCUMENTS)
    got = torch.stack([model.similarity([q[i]], [d[i]]).reshape(()) for i in range(len(QUERIES))]).float()
    assert torch.allclose(got, want, atol=TOL), (got, want)
    if method == "ss_lora":  # two towers: a Router, which a one-encoder ColBERT does not import
        return
    # and back: a ColBERT built from the export keeps how it expands queries, and scores as the run did
    cfg = ModelConfig(architecture="colbert", name=str(out), max_length=48, query_max_length=12, colbert_dim=16)
    back = MODELS.get("colbert").build(cfg, "full", {}).eval()
    assert (back.query_expansion, back.attend_expansion and back.query_expansion) == (
        expansion.get("query_expansion", True), expansion.get("attend_expansion", False))
    marked = expansion.get("markers", True)
    assert (back.query_marker, back.document_marker) == (("[unused0]", "[unused1]") if marked else (None, None))
    with torch.no_grad():
        assert torch.allclose(back(**back.tokenize(QUERIES, DOCUMENTS)).float(), want, atol=TOL)


@pytest.mark.parametrize("method,architecture,options,needle", [
    ("prefix", "cross", {}, "ssft-rerank"),
    ("hidden_prefix", "colbert", {}, "ssft-rerank"),
    ("full", "twin", {"scorer": "combiner"}, "combiner"),
])
def test_refused_exports_are_one_line_and_write_nothing(towers, tmp_path, method, architecture, options, needle):
    folder = trained(architecture, method, towers[0], tmp_path / "model", **options)
    with pytest.raises(SsftError) as err:
        export_run(folder, tmp_path / "export")
    assert "\n" not in str(err.value) and needle in str(err.value)
    assert not (tmp_path / "export").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_export_never_half_written(towers, tmp_path, monkeypatch):
    from ssft.models.interop import export as export_module

    folder = trained("cross", "full", towers[0], tmp_path / "model")
    out = exported(folder, tmp_path / "export")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(SsftError, match="not empty; pass --overwrite"):
        export_run(folder, out)

    def crash(*args, **kwargs):
        raise RuntimeError("killed while writing")

    monkeypatch.setitem(export_module.WRITERS, "cross-encoder", crash)
    with pytest.raises(RuntimeError):
        export_run(folder, out, overwrite=True)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # the previous export, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export", "model"]  # no temporary folder left
    monkeypatch.undo()
    export_run(folder, out, overwrite=True)
    assert (out / "model.safetensors").is_file()


def test_push_to_hub_uploads_the_export_folder(towers, tmp_path, monkeypatch):
    """The hub cannot be reached here: the upload call is checked with HfApi replaced."""
    from ssft.pipeline import export as pipeline_export

    calls = []

    class FakeApi:
        def create_repo(self, repo_id, **kwargs):
            calls.append(("create", repo_id))

        def upload_folder(self, folder_path, repo_id, **kwargs):
            calls.append(("upload", repo_id, sorted(p.name for p in Path(folder_path).iterdir())))

    monkeypatch.setattr(pipeline_export, "HfApi", FakeApi)
    folder = trained("cross", "full", towers[0], tmp_path / "model")
    export_run(folder, tmp_path / "export", push_to_hub="me/ranker")
    assert calls[0] == ("create", "me/ranker")
    assert calls[1][:2] == ("upload", "me/ranker") and "model.safetensors" in calls[1][2] and "README.md" in calls[1][2]
    assert "me/ranker" in (tmp_path / "export" / "README.md").read_text()


def test_model_card_carries_the_runs_metrics(towers, tmp_path):
    from huggingface_hub import ModelCard

    trained("cross", "lora", towers[0], tmp_path / "run" / "model")
    (tmp_path / "run" / "metrics.json").write_text(json.dumps({"test": {"nDCG@10": 0.3125, "RR@10": 0.5},
                                                              "bm25.test": {"nDCG@10": 0.306}}))
    (tmp_path / "run" / "recipe.yaml").write_text("data: {dataset: nfcorpus, test_split: test}\n")
    export_run(tmp_path / "run", tmp_path / "export")
    card = ModelCard.load(tmp_path / "export" / "README.md")
    assert {"ssft", "lora", "cross"} <= set(card.data.tags) and card.data.datasets == ["BeIR/nfcorpus"]
    results = {(r.metric_type, r.dataset_name): r.metric_value for r in card.data.eval_results}
    assert results == {("nDCG@10", "BeIR/nfcorpus"): 0.3125, ("RR@10", "BeIR/nfcorpus"): 0.5}  # the model's own only
    assert "| bm25.test | first stage (reference) | 0.3060 | – |" in card.text
    assert "CrossEncoder(" in card.text


def save_tiny_family(path: Path, family: str) -> Path:
    """A tiny random RoBERTa / MPNet / DistilBERT encoder with the MiniLM WordPiece tokenizer (offline): what matters
    here is the sequence-classification layout of each family, not its own tokenizer (RoBERTa gets two token types,
    since a WordPiece tokenizer gives the document segment id 1)."""
    import transformers
    from transformers import AutoTokenizer

    from ssft.core.hub import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("sentence-transformers/all-MiniLM-L6-v2"))
    torch.manual_seed(2)
    common = dict(vocab_size=tokenizer.vocab_size, max_position_embeddings=130)
    if family == "roberta":
        model = transformers.RobertaModel(transformers.RobertaConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, type_vocab_size=2,
            pad_token_id=tokenizer.pad_token_id, **common), add_pooling_layer=False)
    elif family == "mpnet":
        model = transformers.MPNetModel(transformers.MPNetConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            pad_token_id=tokenizer.pad_token_id, **common), add_pooling_layer=False)
    else:
        model = transformers.DistilBertModel(transformers.DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                                                           pad_token_id=tokenizer.pad_token_id, **common))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("family", ["roberta", "mpnet"])
def test_cross_encoder_export_of_other_families_scores_as_ssft(tmp_path, family):
    """The classifier head in RoBERTa's and MPNet's own layout (classifier.dense + tanh + classifier.out_proj)."""
    base = save_tiny_family(tmp_path / family, family)
    folder = trained("cross", "lora", base, tmp_path / "model", head="classifier")
    want = ssft_scores(folder)
    out = exported(folder, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["model_type"] == family
    got = torch.as_tensor(st.CrossEncoder(str(out)).predict(list(zip(QUERIES, DOCUMENTS))))
    assert torch.allclose(got.float(), want, atol=TOL), (got, want)


def test_a_cross_encoder_without_a_tanh_pooler_layout_is_refused_in_one_line(tmp_path):
    """DistilBERT's sequence-classification head is pre_classifier + ReLU + classifier: ssft's classifier head (dense +
    tanh + linear) has no exact equivalent there, so the export is refused, naming what serves the model."""
    base = save_tiny_family(tmp_path / "distilbert", "distilbert")
    folder = trained("cross", "full", base, tmp_path / "model", head="classifier")
    with pytest.raises(SsftError) as err:
        export_run(folder, tmp_path / "export")
    assert "\n" not in str(err.value) and "'distilbert'" in str(err.value) and "ssft-rerank" in str(err.value)
    assert not (tmp_path / "export").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["distilbert", "model"]
