"""A serving graph that returns only the first token's state computes its last layer for that row only: the same
[CLS] state as the full layer (torch and OpenVINO), for BERT-style encoders, padding included."""
from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModel

from ssft.models.interop.first_token import FirstTokenLayer, first_token_last_layer
from ssft.models.interop.openvino import Graph
from tests.helpers import save_tiny_bert


def _inputs() -> dict[str, torch.Tensor]:
    ids = torch.randint(5, 90, (3, 11), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # padding: the first row must not attend to it
    mask[2, 3:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_the_first_token_layer_gives_the_full_layers_first_row(tmp_path, attention):
    model = AutoModel.from_pretrained(save_tiny_bert(tmp_path / "bert"), attn_implementation=attention).eval()
    full = Graph(copy.deepcopy(model), first_token=True)
    assert isinstance(full.model.encoder.layer[-1], FirstTokenLayer) and full.first_token_layer
    with torch.no_grad():
        expected = model(**_inputs()).last_hidden_state[:, 0]
        got = full(**_inputs())
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_only_a_first_token_graph_of_a_bert_style_encoder_is_changed(tmp_path):
    model = AutoModel.from_pretrained(save_tiny_bert(tmp_path / "bert")).eval()
    graph = Graph(copy.deepcopy(model))  # the whole last_hidden_state leaves it: every row is computed
    assert not graph.first_token_layer and not isinstance(graph.model.encoder.layer[-1], FirstTokenLayer)
    assert not first_token_last_layer(torch.nn.Linear(2, 2))  # no encoder layers: left as it is


def test_the_openvino_graph_serves_the_same_first_token_state(tmp_path):
    pytest.importorskip("openvino")
    from ssft.models.interop.openvino import _compile, convert

    model = AutoModel.from_pretrained(save_tiny_bert(tmp_path / "bert")).eval()
    compiled = _compile(convert(Graph(copy.deepcopy(model), first_token=True)), "fp32")
    inputs = _inputs()
    out = compiled({k: v.numpy() for k, v in inputs.items()})[0]
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state[:, 0]
    torch.testing.assert_close(torch.as_tensor(out), expected, rtol=1e-4, atol=1e-4)
