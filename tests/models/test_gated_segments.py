"""The cross-encoder that starts as its dense checkpoint (``model.head: gated_segments``): untrained it scores every pair
as the checkpoint used as a dense model; a gate opened all the way is a cross-encoder's full attention; the gates and
the adapter learn from the first step; it saves, loads and refuses what it cannot do in one line."""
import pytest
import torch

import ssft
from ssft.config.recipe import ModelConfig
from ssft.core.errors import SsftError
from ssft.models.cross import CrossEncoder
from ssft.models.dense import DenseDualEncoder
from ssft.models.interop import openvino
from ssft.models.interop.export import export_refusal
from ssft.models.segment_gates import segment_layout
from tests.helpers import assert_save_load_round_trip

QUERIES = ["vitamin d bones", "cholesterol statins and the heart", "fish oil"]
DOCUMENTS = ["vitamin d and bone health in adults, a long trial over many years of follow up in three countries, "
             "with falls, fractures, bone density and muscle strength measured every year in every participant",
             "statin drugs lower cholesterol", "omega three fatty acids in fish oil and their effect on memory"]


def _gated(model_dir, method="full", options=None, **keys):
    config = ModelConfig(name=str(model_dir), architecture="cross", head="gated_segments", max_length=40,
                         query_max_length=8, **keys)
    return CrossEncoder.build(config, method, options or {}).eval()


def _pairs():
    return [(q, d) for q in QUERIES for d in DOCUMENTS]


def test_untrained_it_scores_every_pair_as_the_dense_checkpoint(tiny_model_dir):
    gated = _gated(tiny_model_dir)
    dense = DenseDualEncoder.build(ModelConfig(name=str(tiny_model_dir), architecture="dense", pooling="mean",
                                           max_length=40, query_max_length=8), "full", {}).eval()
    assert gated.ranks_untrained and CrossEncoder.ranks_untrained_for(gated.arch_config)
    pairs = _pairs()
    rows = gated.tokenize([q for q, _ in pairs], [d for _, d in pairs])
    segments, _ = segment_layout(rows["input_ids"], rows["attention_mask"], gated.cls_id)
    with torch.no_grad():
        scores = torch.tensor(gated.predict(pairs, batch_size=4))
        q_vectors = dense.encode_query([q for q, _ in pairs], convert_to_tensor=True)
        d_vectors = []
        for (_, d), kept in zip(pairs, (segments == 1).sum(1).tolist()):
            dense.max_length = kept  # the document as the gated layout keeps it: cut at what the query leaves
            d_vectors.append(dense.encode_document([d], convert_to_tensor=True)[0])
    expected = 20.0 * torch.nn.functional.cosine_similarity(q_vectors, torch.stack(d_vectors), dim=-1)
    assert scores == pytest.approx(expected, abs=1e-4)
    tokenizer = gated.tokenizer
    assert any(n < len(tokenizer(d)["input_ids"]) for (_, d), n in zip(pairs, (segments == 1).sum(1).tolist()))


def test_a_fully_open_gate_is_full_attention_over_the_two_segments(tiny_model_dir):
    gated = _gated(tiny_model_dir)
    batch = gated.tokenize(QUERIES, DOCUMENTS)
    segments, positions = segment_layout(batch["input_ids"], batch["attention_mask"], gated.cls_id)
    with torch.no_grad():
        gated.gates.fill_(1.0)
        opened = gated(**batch)
        plain = gated.backbone(batch["input_ids"], batch["attention_mask"], torch.zeros_like(batch["input_ids"]),
                               position_ids=positions)  # no segments given: plain attention
        gated.gates.zero_()
        closed = gated(**batch)
    q = (plain * (segments == 0).unsqueeze(-1)).sum(1) / (segments == 0).sum(1, keepdim=True)
    d = (plain * (segments == 1).unsqueeze(-1)).sum(1) / (segments == 1).sum(1, keepdim=True)
    assert opened == pytest.approx(20.0 * torch.nn.functional.cosine_similarity(q, d, dim=-1), abs=1e-4)
    assert (opened - closed).abs().max() > 1e-3


def test_padding_and_batch_company_do_not_change_a_score(tiny_model_dir):
    gated = _gated(tiny_model_dir)
    with torch.no_grad():
        gated.gates.fill_(0.3)  # open: padding must stay invisible to real tokens either way
        together = gated.predict(_pairs(), batch_size=9)
        alone = [gated.predict([pair])[0] for pair in _pairs()]
    assert together == pytest.approx(alone, abs=1e-4)


def test_the_layout_restarts_positions_at_each_segment_and_cuts_the_query(tiny_model_dir):
    gated = _gated(tiny_model_dir)
    batch = gated.tokenize(["fish oil"], ["omega three"])
    ids = batch["input_ids"][0].tolist()
    tokenizer = gated.tokenizer
    assert ids == tokenizer("fish oil")["input_ids"] + tokenizer("omega three")["input_ids"]
    segments, positions = segment_layout(batch["input_ids"], batch["attention_mask"], gated.cls_id,
                                         batch["token_type_ids"])
    n = len(tokenizer("fish oil")["input_ids"])
    assert positions[0].tolist() == list(range(n)) + list(range(len(ids) - n))
    assert segments[0].tolist() == [0] * n + [1] * (len(ids) - n)
    assert gated.pair_token_lengths(["fish oil"], ["omega three"]) == [len(ids)]
    long_query = gated.tokenize(["vitamin d and bone health in adults over many years"], ["omega three"])
    query_segment, _ = segment_layout(long_query["input_ids"], long_query["attention_mask"], gated.cls_id)
    assert int((query_segment[0] == 0).sum()) == 8  # model.query_max_length
    pairs = _pairs()  # a long document cut to what the query leaves: counted as the rows are built
    rows = gated.tokenize([q for q, _ in pairs], [d for _, d in pairs])
    assert gated.pair_token_lengths([q for q, _ in pairs], [d for _, d in pairs]) == rows["attention_mask"].sum(1).tolist()
    assert max(rows["attention_mask"].sum(1).tolist()) == 40


def test_the_gates_and_the_adapter_learn_from_the_first_step(tiny_model_dir):
    gated = _gated(tiny_model_dir, method="lora", options={"r": 4, "alpha": 8})
    gated.train()
    batch = gated.tokenize(QUERIES, DOCUMENTS)
    scores = gated(**batch).view(1, -1)
    torch.nn.functional.cross_entropy(scores, torch.zeros(1, dtype=torch.long)).backward()
    assert gated.gates.grad is not None and gated.gates.grad.abs().sum() > 0
    assert gated.gates in gated.head_parameters()
    lora = [p for n, p in gated.named_parameters() if "lora_B" in n]
    assert lora and all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora)


def test_it_saves_and_loads_with_its_gates(tiny_model_dir, tmp_path):
    gated = _gated(tiny_model_dir, method="lora", options={"r": 4, "alpha": 8})
    with torch.no_grad():
        gated.gates.copy_(torch.rand_like(gated.gates))
    loaded = assert_save_load_round_trip(gated, tmp_path / "gated", QUERIES, DOCUMENTS)
    assert torch.equal(loaded.gates, gated.gates)


def test_what_it_cannot_do_is_one_line(tiny_model_dir):
    gated = _gated(tiny_model_dir)
    assert "backend torch" in openvino.refusal(gated)
    assert openvino.resolve_backend("auto", gated) == "torch"
    with pytest.raises(SsftError, match="gated_segments gates attention"):
        openvino.resolve_backend("openvino", gated)
    assert "ssft-rerank" in export_refusal(gated)
    with pytest.raises(SsftError, match="cannot take method 'prefix'"):
        _gated(tiny_model_dir, method="prefix", options={"num_virtual_tokens": 2})
    with pytest.raises(SsftError, match=r"query_max_length \(8\), which leaves the document no room"):
        CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), architecture="cross", head="gated_segments",
                                       max_length=10, query_max_length=8), "full", {})
    with pytest.raises(SsftError, match="score_scale"):
        ModelConfig(name=str(tiny_model_dir), architecture="cross", score_scale=10.0).config  # noqa: B018


def test_a_run_scores_its_start_and_trains_the_gates(tmp_path, tiny_dataset, tiny_model_dir):
    recipe = {"model": {"name": str(tiny_model_dir), "architecture": "cross", "head": "gated_segments", "max_length": 48,
                        "query_max_length": 8, "head_learning_rate": 0.05},
              "adapter": {"method": "lora", "r": 4}, "loss": "listwise_ce",
              "data": {"dataset": str(tiny_dataset), "num_negatives": 2, "negatives": "random", "validation_split": None},
              "eval": {"depth": 6},
              "training": {"output_dir": str(tmp_path / "run"), "per_device_train_batch_size": 4, "learning_rate": 1e-2,
                           "max_steps": 2}}
    run = ssft.train(recipe)
    assert run.info["weights_changed"] is True
    assert "start" in run.metrics  # the start ranks (as the dense checkpoint): its row is scored
    trained = ssft.load(run.output_dir, precision="fp32")
    assert trained.gates.abs().sum() > 0  # the gates moved from 0


def test_a_special_tokens_literal_in_a_text_does_not_move_the_border(tiny_model_dir):
    gated = _gated(tiny_model_dir)
    dense = DenseDualEncoder.build(ModelConfig(name=str(tiny_model_dir), architecture="dense", pooling="mean",
                                               max_length=40, query_max_length=8), "full", {}).eval()
    query, document = "what is [CLS] here", "omega three fatty acids"
    batch = gated.tokenize([query], [document])
    n, total = len(gated.tokenizer(query)["input_ids"]), int(batch["attention_mask"].sum())
    assert int((batch["input_ids"][0] == gated.cls_id).sum()) == 3  # the query's own [CLS], its literal, the document's
    segments, positions = segment_layout(batch["input_ids"], batch["attention_mask"], gated.cls_id,
                                         batch["token_type_ids"])
    assert segments[0].tolist() == [0] * n + [1] * (total - n)
    assert positions[0].tolist() == list(range(n)) + list(range(total - n))
    with torch.no_grad():
        score = gated.predict([(query, document)])[0]
        expected = 20.0 * torch.nn.functional.cosine_similarity(
            dense.encode_query([query], convert_to_tensor=True), dense.encode_document([document], convert_to_tensor=True))
    assert score == pytest.approx(float(expected[0]), abs=1e-4)


def test_delta_scale_scales_the_gates_with_the_lora_update(tiny_model_dir):
    """The gates start at 0 as LoRA's B matrices do: handing back a fraction of the update scales both, so the model is
    the weight-space ensemble of its start and its trained weights; zeroing both gives back the start's scores."""
    import types

    from ssft.config.recipe import AdapterSection
    from ssft.pipeline.run import finish_training

    torch.manual_seed(0)
    gated = _gated(tiny_model_dir, "lora", {"r": 4})
    start_scores = torch.tensor(gated.predict(_pairs(), batch_size=4))
    assert [p is gated.gates for p in gated.zero_start_parameters()] == [True]
    with torch.no_grad():  # a trained model: B and the gates off their zero start
        for name, p in gated.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.1)
        gated.gates.uniform_(0.2, 1.0)
    before = {n: p.detach().clone() for n, p in gated.named_parameters()}
    recipe = types.SimpleNamespace(adapter=AdapterSection(method="lora", options={"delta_scale": 0.5}))
    lines = finish_training(recipe, gated)
    assert any("start at zero scaled by 0.5" in line for line in lines)
    for name, p in gated.named_parameters():
        if ".lora_B." in name or name == "gates":
            torch.testing.assert_close(p, 0.5 * before[name])
        else:
            assert torch.equal(p, before[name]), name
    with torch.no_grad():  # the rest of the way to zero: the start again
        for name, p in gated.named_parameters():
            if ".lora_B." in name:
                p.zero_()
        for p in gated.zero_start_parameters():
            p.zero_()
    assert torch.tensor(gated.predict(_pairs(), batch_size=4)) == pytest.approx(start_scores, abs=1e-6)


def test_a_classifier_head_is_not_scaled_with_the_update(tiny_model_dir):
    """A head that starts random is not part of an ensemble with the start: delta_scale leaves it as trained."""
    import types

    from ssft.config.recipe import AdapterSection
    from ssft.pipeline.run import finish_training

    cross = CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), architecture="cross", max_length=40), "lora",
                               {"r": 4})
    assert cross.zero_start_parameters() == []
    head = cross.head.weight.detach().clone()
    recipe = types.SimpleNamespace(adapter=AdapterSection(method="lora", options={"delta_scale": 0.5}))
    assert all("start at zero" not in line for line in finish_training(recipe, cross))
    assert torch.equal(cross.head.weight, head)
