import torch
from transformers import TrainingArguments

from ssft.config.recipe import ModelConfig
from ssft.data.beir import load_dataset
from ssft.data.examples import PairDataset, RankerCollator, TrainingGroups, build_examples
from ssft.losses import PairwiseSoftmaxLoss
from ssft.models.cross import CrossEncoder
from ssft.training.callbacks.best_epoch import BestEpochCallback
from ssft.training.trainer import RankingTrainer


def make_trainer(tiny_model_dir, tiny_dataset, tmp_path, method="lora", **kwargs):
    torch.manual_seed(0)
    ranker = CrossEncoder.build(ModelConfig(name=str(tiny_model_dir), max_length=48), method, {})
    ds = load_dataset(str(tiny_dataset))
    examples = build_examples(ds.qrels("train"), list(ds.corpus), None)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, learning_rate=1e-3,
                             report_to=[], remove_unused_columns=False, use_cpu=True, save_strategy="no",
                             dataloader_pin_memory=False, **kwargs)
    dev = ds.qrels("dev")
    pairs = PairDataset({"q5": {d: 1.0 for d in ds.corpus}}, 6, ds)
    trainer = RankingTrainer(model=ranker, args=args, train_dataset=TrainingGroups(examples, ds, 2),
                             eval_dataset=pairs, data_collator=RankerCollator(ranker), loss=PairwiseSoftmaxLoss(),
                             head_learning_rate=5e-2, eval_qrels=dev, eval_metrics=["nDCG@10", "RR@10"])
    return trainer, ranker, ds


def test_head_gets_its_own_learning_rate(tiny_model_dir, tiny_dataset, tmp_path):
    trainer, ranker, _ = make_trainer(tiny_model_dir, tiny_dataset, tmp_path)
    optimizer = trainer.create_optimizer()
    head = {id(p) for p in ranker.head_parameters()}
    lrs = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            lrs[id(p)] = group["lr"]
    assert all(lrs[i] == 5e-2 for i in head)
    others = [lr for i, lr in lrs.items() if i not in head]
    assert others and all(lr == 1e-3 for lr in others)
    assert len(lrs) == sum(1 for p in ranker.parameters() if p.requires_grad)


def test_compute_loss_groups_scores(tiny_model_dir, tiny_dataset, tmp_path):
    trainer, ranker, _ = make_trainer(tiny_model_dir, tiny_dataset, tmp_path)
    collate = RankerCollator(ranker)
    inputs = collate([trainer.train_dataset[0], trainer.train_dataset[1]])
    assert inputs["input_ids"].shape[0] == 6 and int(inputs["group_size"]) == 3
    loss, scores = trainer.compute_loss(ranker, dict(inputs), return_outputs=True)
    assert scores.shape == (2, 3) and 0.0 <= loss.item() <= 1.0


def test_predict_scores_pairs_in_order(tiny_model_dir, tiny_dataset, tmp_path):
    trainer, ranker, ds = make_trainer(tiny_model_dir, tiny_dataset, tmp_path)
    ranker.eval()
    pairs = trainer.eval_dataset
    scores = trainer.predict(pairs).predictions
    assert scores.shape == (len(pairs),)
    q, d = pairs.pairs[3]
    with torch.no_grad():
        direct = ranker(**ranker.tokenize([ds.queries[q]], [ds.corpus[d].full_text]))
    assert abs(float(direct[0]) - float(scores[3])) < 1e-5


def test_training_with_best_epoch_restores_best_weights(tiny_model_dir, tiny_dataset, tmp_path):
    trainer, ranker, _ = make_trainer(tiny_model_dir, tiny_dataset, tmp_path, num_train_epochs=3, eval_strategy="epoch")
    best = BestEpochCallback("nDCG@10")
    trainer.add_callback(best)
    trainer.train()
    assert len(best.history) == 3
    assert best.best_value == max(h["eval_nDCG@10"] for h in best.history)
    ranker.eval()
    # after training the model holds the best epoch's weights: re-evaluating gives the best value
    assert abs(trainer.evaluate()["eval_nDCG@10"] - best.best_value) < 1e-6
