"""Both translation tasks end to end through the Task interface the runner calls."""
import math

import pytest
import sacrebleu
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from rmsnorm_repro.norms import build_normalization
from rmsnorm_repro.runner import train_step
from rmsnorm_repro.tasks import get_task_class
from rmsnorm_repro.tasks.translation.data import collate

CONFIGS = str(Path(__file__).resolve().parents[2] / "configs")
# a small language and tiny models, so a few hundred CPU steps learn it
TINY = ["task.synthetic.nouns=8", "task.synthetic.adjectives=4", "task.synthetic.verbs=4",
        "task.synthetic.max_adjectives=1", "task.synthetic.train=3000", "task.synthetic.valid=60",
        "task.synthetic.test=40", "task.synthetic.vocab_size=200", "task.decode.valid_sentences=30",
        "task.decode.beam=3"]
MODELS = {
    "transformer": ["task.model.encoder_layers=1", "task.model.decoder_layers=1", "task.model.d_model=32",
                    "task.model.ffn_dim=64", "task.model.heads=2", "task.model.dropout=0.0", "train.batch_tokens=400", "optim.lr=5e-3"],
    "rnnsearch": ["task.model.emb=24", "task.model.hidden=32", "task.model.dropout=0.0", "train.batch_size=24",
                  "optim.lr=1e-2"],
}


def make_task(tmp_path, task, norm="rmsnorm", extra=()):
    with initialize_config_dir(config_dir=CONFIGS, version_base="1.3"):
        cfg = compose("train", overrides=[f"task={task}", f"norm={norm}", "scale=mini",
                                          f"paths.cache_dir={tmp_path / 'cache'}", *TINY, *MODELS[task], *extra])
    cls = get_task_class(task)
    norms = build_normalization(cfg.norm.name, cfg.norm, cls.supported_norms, task)
    torch.manual_seed(cfg.seed)
    t = cls(cfg, norms, torch.device("cpu"))
    return t, t.build_model()


def train(task, model, steps):
    """The runner's own step (Adam, global clip at 1.0), without the runner around it."""
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=task.cfg.optim.lr, betas=tuple(task.cfg.optim.betas))
    model.train()
    for step in range(steps):
        loss, n, _ = train_step(task, model, opt, task.train_batch(step), params, clip=1.0, clip_mode="global")
        assert n > 0
    model.eval()
    return loss.item()


def test_transformer_learns_the_synthetic_pair(tmp_path):
    task, model = make_task(tmp_path, "transformer")
    assert task.unit == "tokens" and task.best_metric == ("bleu", "max")
    model.eval()
    before = task.evaluate(model, "valid")
    train(task, model, 150)
    after = task.evaluate(model, "valid")
    assert set(after) == {"bleu", "loss"}
    assert after["loss"] < before["loss"] - 1.0
    assert before["bleu"] < 2 and after["bleu"] > 8, (before, after)
    # our BLEU is sacreBLEU's on the detokenized output against the raw references
    src, refs = task.data.valid_text
    hyps = task.translate(model, task.data.valid, beam=3)
    test = task.evaluate(model, "test")
    assert test["valid_beam_bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert set(test) == {"valid_beam_bleu", "test_bleu", "test_sentences"} and test["test_sentences"] == 40
    assert "tok:13a" in task.bleu_signature and task.data_info["data"] == "synthetic"


def test_norm_none_transformer_runs_and_reports(tmp_path):
    task, model = make_task(tmp_path, "transformer", "none", ["optim.lr=1.0"])
    train(task, model, 3)  # an absurd lr: whatever happens, training and evaluation must not crash
    out = task.evaluate(model, "valid")
    assert set(out) == {"bleu", "loss"} and 0 <= out["bleu"] <= 100
    with torch.no_grad():  # a diverged model (NaN weights) still decodes and scores, near 0
        model.encoder[0].ffn[0].weight.fill_(float("nan"))
    out = task.evaluate(model, "valid")
    assert 0 <= out["bleu"] < 5 and math.isnan(out["loss"])


@pytest.mark.parametrize("task_name", ["transformer", "rnnsearch"])
def test_padding_inside_a_real_batch_changes_nothing(tmp_path, task_name):
    task, model = make_task(tmp_path, task_name, "layernorm")
    model = model.double().eval()
    enc = task.data.train
    idx = task.data.batch_indices(0)[:6].tolist()
    lengths = [len(enc.src_ids(i)) + len(enc.tgt_ids(i)) for i in idx]
    idx = [idx[lengths.index(min(lengths))]] + idx  # the shortest sentence, alone and padded
    full = collate(enc, idx)
    alone = collate(enc, idx[:1])
    assert full["src"].shape[1] > alone["src"].shape[1] or full["tgt_in"].shape[1] > alone["tgt_in"].shape[1]
    with torch.no_grad():
        a = model(alone["src"], alone["src_mask"], alone["tgt_in"])[0]
        b = model(full["src"], full["src_mask"], full["tgt_in"])[0, : a.shape[0]]
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_rnnsearch_end_to_end_with_table5(tmp_path):
    pytest.importorskip("rmsnorm_repro.tasks.translation.rnnsearch")
    task, model = make_task(tmp_path, "rnnsearch")
    assert task.supported_norms == ("none", "layernorm", "rmsnorm", "prmsnorm", "l2norm", "weightnorm")
    model.eval()
    before = task.evaluate(model, "valid")
    train(task, model, 60)
    after = task.evaluate(model, "valid")
    assert after["loss"] < before["loss"] - 1.0, (before, after)
    test = task.evaluate(model, "test")
    for label in ("1", "2", "3", "4", "all"):
        assert math.isfinite(test[f"table5_mean_{label}"]) and test[f"table5_std_{label}"] > 0
    assert 0 <= test["test_bleu"] <= 100


def test_ranks_share_the_global_batch(tmp_path):
    task, _ = make_task(tmp_path, "rnnsearch")
    full = task.train_batch(4)
    parts = [task.train_batch(4, rank=r, world_size=3) for r in range(3)]
    assert sum(p["src"].shape[0] for p in parts) == full["src"].shape[0] == 24
    got = sorted(map(tuple, (row[m].tolist() for p in parts for row, m in zip(p["src"], p["src_mask"]))))
    want = sorted(map(tuple, (row[m].tolist() for row, m in zip(full["src"], full["src_mask"]))))
    assert got == want


def test_text_data_through_the_task(tmp_path):
    root = tmp_path / "m30k"
    root.mkdir()
    words = ["red", "dog", "runs", "big", "cat", "sleeps", "on", "the", "grass"]
    en = [" ".join(words[(i + j) % 9] for j in range(3 + i % 4)).capitalize() + "." for i in range(80)]
    for split, sl in (("train", slice(0, 60)), ("val", slice(60, 70)), ("test_2016_flickr", slice(70, 80))):
        (root / f"{split}.en").write_text("\n".join(en[sl]) + "\n")
        (root / f"{split}.de").write_text("\n".join(s.upper() for s in en[sl]) + "\n")
    task, model = make_task(tmp_path, "transformer", "rmsnorm",
                            ["data=text", f"data.root={root}", "data.vocab_size=60", "data.test=[test_2016_flickr]"])
    train(task, model, 2)
    out = task.evaluate(model, "test")
    assert set(out) == {"valid_beam_bleu", "test_bleu", "test_sentences"} and out["test_sentences"] == 10
    # the translations behind each score, kept for the paired bootstrap
    assert {k: len(v) for k, v in task.test_outputs().items()} == {"valid": 10, "test": 10}
    assert task.evaluate(model, "valid")["bleu"] >= 0 and task.data.dev is task.data.valid  # no dev split: valid selects

    held, model = make_task(tmp_path, "transformer", "rmsnorm", ["data=text", f"data.root={root}", "data.vocab_size=60",
                                                                 "data.dev_pairs=8"])
    assert len(held.data.dev) == 8 and held.data_info["train_pairs"] == 52
    assert held.data.dev_text == (en[52:60], [s.upper() for s in en[52:60]])
    # evaluation during training reads dev: its loss is dev's, not valid's
    with torch.no_grad():
        valid_loss, dev_loss = held.nll(model.eval(), held.data.valid), held.nll(model, held.data.dev)
    assert held.evaluate(model, "valid")["loss"] == pytest.approx(dev_loss)
    assert held.evaluate(model, "valid")["loss"] != pytest.approx(valid_loss)


def test_nematus_loss_is_each_sentences_summed_cost_averaged_over_sentences(tmp_path):
    task, model = make_task(tmp_path, "rnnsearch")
    batch = task.train_batch(0)
    torch.manual_seed(0)
    per_token, n = task.loss(model.eval(), batch)
    task.cfg.task.loss_per = "sentence"
    per_sentence, n2 = task.loss(model, batch)
    sentences = len(batch["tgt_out"])
    assert n == n2 == int(batch["tgt_mask"].sum()) and task.loss_mean_over == "sentences"
    assert per_sentence.item() == pytest.approx(per_token.item() * n / sentences, rel=1e-6)
    # either way the logging window sums the batch's cost: Nematus' Loss/word is sum / target tokens
    assert task.summed_loss(per_sentence.item(), n, batch) == pytest.approx(per_token.item() * n, rel=1e-6)
    assert task.summed_loss(per_sentence.item(), n, batch, world_size=2) == pytest.approx(2 * per_token.item() * n, rel=1e-6)
    task.cfg.task.loss_per = "token"
    assert task.summed_loss(per_token.item(), n, batch) == pytest.approx(per_token.item() * n, rel=1e-6)
    task.cfg.task.loss_per = "word"
    with pytest.raises(ValueError, match="task.loss_per must be token or sentence"):
        type(task).check_config(task.cfg)


def test_label_smoothing_is_nematus_late_2018_option(tmp_path):
    """Nematus 3655c38 layers.py:536-552 (--label_smoothing, nmt.py:621): target eps/V + (1 - eps) on the
    true word, eps/V elsewhere, cross-entropy summed over each sentence's target words (mask), then the
    batch mean over sentences (model.py:63-68). Computed by hand in float64 from the model's logits."""
    task, model = make_task(tmp_path, "rnnsearch", extra=("task.loss_per=sentence",))
    assert task.cfg.task.label_smoothing == 0.1
    batch = task.train_batch(0)
    model.eval()
    loss, _ = task.loss(model, batch)
    logp = torch.log_softmax(model(batch["src"], batch["src_mask"], batch["tgt_in"]).double(), -1)
    eps, v = 0.1, logp.size(-1)
    target = torch.full_like(logp, eps / v).scatter_(-1, batch["tgt_out"][..., None], 1 - eps + eps / v)
    cost = -(target * logp).sum(-1) * batch["tgt_mask"]
    assert loss.item() == pytest.approx(cost.sum(1).mean().item(), rel=1e-5)
