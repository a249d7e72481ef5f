"""Tiny sizes per task, in one place: Hydra overrides that shrink a task (model and synthetic data) so
a run of a few steps takes about a second on one CPU thread. Any test may use them:

    from tiny_sizes import tiny_overrides
    cfg = compose(["task=reader", *tiny_overrides("reader")])
    cli("-m", "experiment=table6", *tiny_overrides("reader"), ...)

They go after the task (or experiment) choice, so they win over its scale file; they set sizes only,
never the norm, the seed or where files go.
"""
from __future__ import annotations

# the loop: two steps, one evaluation at the end, one checkpoint
STEPS = ["train.steps=2", "train.eval_every=2", "train.log_every=1", "train.checkpoint_every=2"]

# a small language (both translation tasks read the same synthetic pair) and a short decode
_TRANSLATION_DATA = ["task.synthetic.nouns=8", "task.synthetic.adjectives=4", "task.synthetic.verbs=4",
                     "task.synthetic.max_adjectives=1", "task.synthetic.train=200", "task.synthetic.valid=8",
                     "task.synthetic.test=8", "task.synthetic.vocab_size=60", "task.decode.valid_sentences=8",
                     "task.decode.beam=2"]

TINY: dict[str, list[str]] = {
    "rnnsearch": [*_TRANSLATION_DATA, "task.model.emb=16", "task.model.hidden=16", "train.batch_size=8"],
    "transformer": [*_TRANSLATION_DATA, "task.model.encoder_layers=1", "task.model.decoder_layers=1",
                    "task.model.d_model=16", "task.model.ffn_dim=32", "task.model.heads=2", "train.batch_tokens=200"],
    "reader": ["task.model.emb_dim=8", "task.model.hidden=8", "task.synthetic.train_size=64",
               "task.synthetic.valid_size=16", "task.synthetic.test_size=16", "task.eval_batch_size=16",
               "train.batch_size=8"],
    "retrieval": ["task.model.word_dim=8", "task.model.dim=16", "task.synthetic.objects=12",
                  "task.synthetic.feature_dim=16", "task.synthetic.train_images=64",
                  "task.synthetic.valid_images=16", "task.synthetic.test_images=16", "train.batch_size=8"],
    "convpool": ["task.model.width_mult=0.05", "task.synthetic.train_size=64", "task.synthetic.test_size=32",
                 "task.train_error_size=32", "task.eval_batch_size=32", "train.batch_size=8"],
}


def tiny_overrides(task: str, *, steps: bool = True) -> list[str]:
    """The task's tiny sizes (plus the two-step loop of STEPS unless steps=False)."""
    return [*TINY[task], *(STEPS if steps else [])]
