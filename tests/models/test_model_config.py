"""The ``model`` section: common keys on ``ModelConfig``, each architecture's own keys parsed into its typed ``Config``
(beside the ranker), from the same flat YAML keys as before; saved specs read into the same typed configs."""
from __future__ import annotations

import pytest

from ssft.config.model import ModelConfig
from ssft.config.recipe import recipe_from_dict
from ssft.core.errors import SsftError
from ssft.models.colbert import ColBert, ColbertConfig
from ssft.models.cross import CrossConfig, CrossEncoder
from ssft.models.dense import DenseConfig, DenseDualEncoder
from ssft.models.twin import TwinConfig

# the flat keys a resolved recipe's model section has always held, in this order
FLAT_KEYS = ["architecture", "name", "max_length", "query_max_length", "head_learning_rate", "trust_remote_code",
             "head", "dual_pooling", "score_scale", "pooling", "scorer", "combiner_start", "colbert_dim",
             "projection_start", "attend_expansion", "query_expansion", "markers", "document_name", "projection_dim",
             "query_layers", "normalize"]


def _model(**keys):
    return recipe_from_dict({"model": keys, "loss": {"name": "contrastive"} if keys.get("architecture") == "dense"
                             else {}}, "r.yaml").model


@pytest.mark.parametrize("keys,expected", [
    ({"architecture": "cross", "head": "dual_pooled", "dual_pooling": "segment_mean"},
     CrossConfig(head="dual_pooled", dual_pooling="segment_mean")),
    ({"architecture": "twin", "pooling": "cls", "scorer": "dot"}, TwinConfig(pooling="cls", scorer="dot")),
    ({"architecture": "colbert", "colbert_dim": "64"}, ColbertConfig(colbert_dim=64)),
    ({"architecture": "dense", "document_name": "m2", "projection_dim": 64, "score_scale": 1, "normalize": False,
      "query_layers": [0, 2], "pooling": "cls"},
     DenseConfig(document_name="m2", projection_dim=64, score_scale=1.0, normalize=False, query_layers=[0, 2],
                 pooling="cls")),
])
def test_the_flat_keys_are_parsed_into_the_architectures_typed_config(keys, expected):
    model = _model(**keys)
    assert model.config == expected and type(model.config) is type(expected)
    assert not hasattr(model, "pooling")  # the architecture's keys live on its config only


def test_a_resolved_recipe_writes_the_same_flat_keys_and_reads_back_as_the_same_model():
    recipe = recipe_from_dict({"model": {"architecture": "twin", "scorer": "cosine"}}, "r.yaml")
    flat = recipe.to_dict()["model"]
    assert list(flat) == FLAT_KEYS
    assert (flat["scorer"], flat["pooling"], flat["head"], flat["colbert_dim"], flat["score_scale"]) == \
        ("cosine", "mean", "classifier", 128, 20.0)
    again = recipe_from_dict({"model": flat}, "resolved.yaml").model
    assert again.to_dict() == flat and again.config == TwinConfig(scorer="cosine")


def test_a_key_of_another_architecture_is_accepted_at_its_default_only():
    assert _model(architecture="cross", pooling="mean", score_scale=20, colbert_dim=128).config == CrossConfig()
    with pytest.raises(SsftError, match=r"^r.yaml: model.colbert_dim: only for model.architecture 'colbert', not 'cross'$"):
        _model(architecture="cross", colbert_dim=64)
    with pytest.raises(SsftError, match=r"^r.yaml: model.pooling: only for model.architecture 'twin' or 'dense', "
                                        r"not 'colbert'$"):
        _model(architecture="colbert", pooling="cls")
    with pytest.raises(SsftError, match=r"^r.yaml: model: unknown key 'scorrer' \(did you mean 'scorer'\?\); known: "):
        _model(architecture="twin", scorrer="dot")


@pytest.mark.parametrize("keys,message", [
    ({"architecture": "cross", "head": "mlp"},
     "model.head: expected one of classifier, cls_linear, dual_pooled, gated_segments, got 'mlp'"),
    ({"architecture": "twin", "scorer": "l2"}, "model.scorer: expected one of combiner, cosine, dot, got 'l2'"),
    ({"architecture": "colbert", "colbert_dim": 0}, "model.colbert_dim: must be >= 1"),
    ({"architecture": "dense", "query_layers": [2, 1]}, "model.query_layers: a list of layers must be increasing"),
    ({"architecture": "dense", "score_scale": 0}, "model.score_scale: must be > 0"),
    ({"architecture": "dense", "projection_dim": "big"}, "model.projection_dim: expected an integer, got 'big'"),
])
def test_a_bad_value_is_one_line_naming_the_key(keys, message):
    with pytest.raises(SsftError) as err:
        _model(**keys)
    assert str(err.value).startswith(f"r.yaml: {message}") and "\n" not in str(err.value)


def test_model_config_takes_the_keys_flat_and_reparses_when_they_change():
    cfg = ModelConfig(architecture="dense", name="m", pooling="cls", normalize=False)
    assert (cfg.name, cfg.options) == ("m", {"pooling": "cls", "normalize": False})
    assert cfg.config == DenseConfig(pooling="cls", normalize=False)
    cfg.architecture, cfg.options = "twin", {"pooling": "cls"}
    assert cfg.config == TwinConfig(pooling="cls")
    assert ModelConfig().config == CrossConfig()


def test_a_saved_spec_reads_into_the_typed_config_with_what_older_folders_meant():
    # a spec saved before model.head existed: cls_linear, not the default of new runs (classifier)
    assert CrossEncoder.config_from_spec({}) == CrossConfig(head="cls_linear")
    assert CrossConfig().head == "classifier"
    # a folder saved before the warm starts: its projection and combiner started at random; before the expansion
    # keys: marked, expanded and attended, as ssft's ColBERT then always was
    assert ColBert.config_from_spec({"colbert_dim": 16, "query_marker": "[Q]"}) == ColbertConfig(
        colbert_dim=16, projection_start="random", attend_expansion=True, query_expansion=True, markers=True)
    assert ColbertConfig().markers is None  # a new model: as its checkpoint (ColBert.spec_from_pretrained)
    assert DenseDualEncoder.config_from_spec({"projection_dim": 8, "normalize": None}).projection_dim == 8
    with pytest.raises(SsftError, match=r"^m/ssft_model.json: model.head: expected one of"):
        CrossEncoder.config_from_spec({"head": "mlp"}, "m/ssft_model.json: model")
    # the cross-encoder's spec keeps dual_pooling only for the head that reads it
    assert CrossEncoder.spec_of(CrossConfig()) == {"head": "classifier"}
    assert CrossEncoder.spec_of(CrossConfig("dual_pooled", "segment_mean")) == {"head": "dual_pooled",
                                                                                "dual_pooling": "segment_mean"}
