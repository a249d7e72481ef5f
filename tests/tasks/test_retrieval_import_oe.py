"""The authors' order-embedding model (rmsnorm README.md:175-178) imported: tiny files written here in
ivendrov/order-embedding's (OE) format, our model's embeddings against a float64 NumPy re-implementation
of THEIR encoder (OE model.py, layers.py, tools.py; rmsnorm layers.py rln / rlngru_layer), the refusals,
and the scoring command end to end against OE's own evaluation.py ranking."""
import json
from collections import Counter, OrderedDict

import numpy as np
import pytest
import torch

from rmsnorm_repro.errors import ConfigError
from rmsnorm_repro.tasks.retrieval import import_oe
from rmsnorm_repro.tasks.retrieval.data import caption_encoder, load_coco, pad_captions, read_coco_split

DIM, WORD, IMAGE = 6, 5, 7
CAPTIONS = ["a dog on grass", "a cat", "two dogs near a red car", "a dog", "", "the cat on a car",
            "A Dog with a zebra", "red café grass", "a a a a a a a", "car"]


# Their files ----------------------------------------------------------------------------------------
def py2_pickle(obj) -> bytes:
    """What Python 2's cPickle.dumps(obj) (protocol 0) writes, less the memo (pN) lines, for OE's model
    dict: dicts, an OrderedDict (its __reduce__: the class and a list of [key, value] lists), str, int,
    float, bool. Python 3's pickle cannot write this: its protocol 0 writes str as unicode."""
    out = []

    def put(v):
        if isinstance(v, OrderedDict):
            out.append(b"ccollections\nOrderedDict\n((l")
            for k, x in v.items():
                out.append(b"(l"), put(k), out.append(b"a"), put(x), out.append(b"aa")
            out.append(b"tR")
        elif isinstance(v, dict):
            out.append(b"(d")
            for k, x in v.items():
                put(k), put(x), out.append(b"s")
        elif isinstance(v, bool):
            out.append(b"I01\n" if v else b"I00\n")
        elif isinstance(v, int):
            out.append(b"I%d\n" % v)
        elif isinstance(v, float):
            out.append(b"F%s\n" % (b"%.17g" % v))
        else:  # a Python 2 str: bytes, written as their repr
            out.append(b"S" + repr(v.encode("utf-8"))[1:].encode("ascii") + b"\n")
    put(obj)
    return b"".join(out) + b"."


# cPickle.dumps({'options': {'dim': 16, 'margin': 0.05, 'abs': True, 'encoder': 'lngru'},
#                'worddict': OrderedDict([('a', 2), ('dog', 3)])}) by Python 2.7.18, memo and all
CPICKLE_BYTES = (b"(dp1\nS'worddict'\np2\nccollections\nOrderedDict\np3\n((lp4\n(lp5\nS'a'\naI2\naa(lp6\nS'dog'\n"
                 b"p7\naI3\naatRp8\nsS'options'\np9\n(dp10\nS'dim'\np11\nI16\nsS'abs'\np12\nI01\nsS'margin'\np13\n"
                 b"F0.050000000000000003\nsS'encoder'\np14\nS'lngru'\np15\nss.")


def build_dictionary(captions):
    """OE vocab.py:7-27: ids from 2 by falling count (their argsort reversed; here ties by first use)."""
    counts = Counter(w for c in captions for w in c.split())
    ranked = sorted(counts, key=lambda w: -counts[w])
    return OrderedDict((w, i + 2) for i, w in enumerate(ranked))


def their_params(kind, n_words, seed=0):
    """OE init_params' names and shapes (model.py:13-29, layers.py param_init_*), random values: gains
    and offsets far from 1 and 0 so that a site mixed up shows."""
    rng = np.random.default_rng(seed)
    f32 = lambda *shape: rng.uniform(-0.8, 0.8, shape).astype(np.float32)
    p = {"Wemb": f32(n_words, WORD), "encoder_W": f32(WORD, 2 * DIM), "encoder_b": f32(2 * DIM),
         "encoder_U": f32(DIM, 2 * DIM), "encoder_Wx": f32(WORD, DIM), "encoder_Ux": f32(DIM, DIM),
         "encoder_bx": f32(DIM), "ff_image_W": f32(IMAGE, DIM), "ff_image_b": f32(DIM)}
    for letter in {"gru": "", "rlngru": "s", "lngru": "sb"}[kind]:
        for i, size in enumerate((2 * DIM, DIM, 2 * DIM, DIM), 1):
            p[f"encoder_{letter}{i}"] = (1.0 + f32(size) if letter == "s" else f32(size))
    return p


def write_model(tmp_path, kind="rlngru", encoder=None, n_words=None, options=None, params=None):
    """order.pkl and order.npz as OE's train.py writes them (:71-75 pkl.dump(curr_model), :178 numpy.savez)."""
    worddict = build_dictionary(CAPTIONS[:8])
    n_words = n_words or len(worddict) + 2
    opts = {"method": "order", "margin": 0.05, "abs": True, "max_epochs": 100, "data": "coco", "cnn": "10crop",
            "dim_image": IMAGE, "encoder": encoder or kind, "dispFreq": 10, "grad_clip": 2.0, "optimizer": "adam",
            "batch_size": 128, "dim": DIM, "dim_word": WORD, "lrate": 0.001, "validFreq": 300, "n_words": n_words,
            **(options or {})}
    (tmp_path / "order.pkl").write_bytes(py2_pickle({"options": opts, "worddict": worddict}))
    params = their_params(kind, n_words) if params is None else params
    np.savez(tmp_path / "order", **params)
    return tmp_path / "order", params, worddict, n_words


# Their encoder, float64 ------------------------------------------------------------------------------
def rln(x, s):  # rmsnorm layers.py:10-14
    return s * x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5)


def ln(x, b, s):  # rmsnorm layers.py:17-21 (Theano's var: the population variance)
    return s * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) + b


def their_caption(p, kind, ids):
    """OE model.py:65-80 on one caption of ids (no padding: tools.py batches captions of one length)."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    norm = {"gru": lambda x, i: x, "rlngru": lambda x, i: rln(x, p[f"encoder_s{i}"]),
            "lngru": lambda x, i: ln(x, p[f"encoder_b{i}"], p[f"encoder_s{i}"])}[kind]
    sig = lambda x: 1.0 / (1.0 + np.exp(-x))
    h = np.zeros(DIM)
    for t in ids:  # layers.py gru_layer / rlngru_layer / lngru_layer _step_slice
        emb = p["Wemb"][t]
        x_ = norm(emb @ p["encoder_W"] + p["encoder_b"], 1)
        xx_ = norm(emb @ p["encoder_Wx"] + p["encoder_bx"], 2)
        preact = norm(h @ p["encoder_U"], 3) + x_
        r, u = sig(preact[:DIM]), sig(preact[DIM:])
        h_new = np.tanh(norm(h @ p["encoder_Ux"], 4) * r + xx_)
        h = u * h + (1.0 - u) * h_new
    return np.abs(h / np.linalg.norm(h))  # l2norm, abs (options['abs'])


def their_ids(caption, worddict, n_words, eos=True):
    """OE tools.py:76-82: unknown or >= n_words -> 1, then one more step on 0 (<eos>)."""
    ids = [worddict[w] if w in worddict and worddict[w] < n_words else 1 for w in caption.split()]
    return ids + [0] if eos else ids


def their_image(p, im):  # OE model.py:82-88, layers.py fflayer with activ='linear'
    e = im.astype(np.float64) @ p["ff_image_W"].astype(np.float64) + p["ff_image_b"].astype(np.float64)
    return np.abs(e / np.linalg.norm(e, axis=-1, keepdims=True))


def ours(model, vocab, captions, eos=True):
    encode = caption_encoder(vocab, eos)
    with torch.no_grad():
        return model.double().encode_captions(*pad_captions([encode(c.split()) for c in captions],
                                                            torch.device("cpu"))).numpy()


# The tests ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,encoder,chosen", [("rlngru", "rlngru", None), ("rlngru", "lngru", None),
                                                 ("gru", "gru", None), ("lngru", "lngru", "lngru")])
def test_our_embeddings_equal_their_encoder_in_float64(tmp_path, kind, encoder, chosen):
    """rlngru; the README's 'lngru' name for it (gains only); the plain GRU; a LayerNorm lngru (offsets too,
    --encoder lngru). Captions of mixed lengths in one padded batch, an empty one, unknown words, upper case."""
    path, params, worddict, n_words = write_model(tmp_path, kind, encoder)
    model, vocab, got_kind = import_oe.load_oe_model(path, chosen)
    assert got_kind == kind and vocab[:3] == ["<pad>", "<unk>", "<eos>"]
    expected = np.stack([their_caption(params, kind, their_ids(c, worddict, n_words)) for c in CAPTIONS])
    np.testing.assert_allclose(ours(model, vocab, CAPTIONS), expected, rtol=0, atol=1e-13)
    without_eos = ours(model, vocab, CAPTIONS[:4], eos=False)
    np.testing.assert_allclose(without_eos, [their_caption(params, kind, their_ids(c, worddict, n_words, eos=False))
                                             for c in CAPTIONS[:4]], rtol=0, atol=1e-13)
    assert np.abs(without_eos - expected[:4]).max() > 1e-3  # the EOS step changes the embedding
    ims = np.random.default_rng(1).random((4, IMAGE)).astype(np.float32)
    with torch.no_grad():
        got = model.encode_images(torch.from_numpy(ims).double()).numpy()
    np.testing.assert_allclose(got, their_image(params, ims), rtol=0, atol=1e-13)


def test_an_lngru_model_with_offsets_read_as_rlngru_leaves_the_offsets_unread(tmp_path):
    """README.md:180-181: their lngru-named model runs the rlngru functions; OE's load_params reads only
    those functions' parameters, so b1..b4 play no part."""
    path, params, worddict, n_words = write_model(tmp_path, "lngru")
    model, vocab, kind = import_oe.load_oe_model(path, "rlngru")
    expected = [their_caption(params, "rlngru", their_ids(c, worddict, n_words)) for c in CAPTIONS]
    assert kind == "rlngru"
    np.testing.assert_allclose(ours(model, vocab, CAPTIONS), expected, rtol=0, atol=1e-13)


def test_words_past_n_words_are_unknown_as_their_tools_read_them(tmp_path):
    worddict = build_dictionary(CAPTIONS[:8])
    path, params, worddict, n_words = write_model(tmp_path, n_words=len(worddict) - 1)  # the 3 rarest cut
    model, vocab, _ = import_oe.load_oe_model(path)
    assert len(vocab) == n_words + 1
    expected = [their_caption(params, "rlngru", their_ids(c, worddict, n_words)) for c in CAPTIONS]
    np.testing.assert_allclose(ours(model, vocab, CAPTIONS), expected, rtol=0, atol=1e-13)


def test_the_reader_reads_what_python2_cpickle_wrote(tmp_path):
    (tmp_path / "m.pkl").write_bytes(CPICKLE_BYTES)
    with pytest.raises(ConfigError, match="options lack dim_word, dim_image, n_words, method"):
        import_oe.read_oe_pickle(tmp_path / "m.pkl")
    # the same structure from this test's writer reads the same
    model = {"worddict": OrderedDict([("a", 2), ("dog", 3)]),
             "options": {"dim": 16, "abs": True, "margin": 0.05, "encoder": "lngru"}}
    (tmp_path / "w.pkl").write_bytes(py2_pickle(model))
    import pickle
    for name in ("m.pkl", "w.pkl"):
        got = import_oe._text(import_oe._OEUnpickler(open(tmp_path / name, "rb"), encoding="bytes").load())
        assert got == model and isinstance(got["worddict"], OrderedDict) and got["options"]["abs"] is True
    assert pickle.loads(CPICKLE_BYTES, encoding="bytes")[b"options"][b"margin"] == 0.05


def test_the_norms_are_the_retrieval_recipes_and_theirs():
    """rmsnorm layers.py:10-14 rln: x / sqrt(mean(x^2) + 1e-5) * s, no offset; :17-21 ln: eps 1e-5, offset."""
    rms = import_oe.recipe_norm("rmsnorm")
    assert (rms["p"], rms["eps"], rms["eps_inside"], rms["bias"]) == (1.0, 1e-5, True, False)
    layer = import_oe.recipe_norm("layernorm")
    assert (layer["eps"], layer["bias"]) == (1e-5, True)


@pytest.mark.parametrize("change,message", [
    (lambda p: p.pop("encoder_s3"), r"order.npz: no encoder_s3 \(want shape \(12,\) for OE's rlngru model\)"),
    (lambda p: p.update(encoder_extra=np.zeros(3, np.float32)), "encoder_extra is not a parameter of OE's rlngru model"),
    (lambda p: p.update(ff_image_W=p["ff_image_W"].T.copy()), r"ff_image_W has shape \(6, 7\) \(float32\); want \(7, 6\)"),
    (lambda p: p.update(encoder_b1=np.zeros(12, np.float32)),  # offsets are left unread only under the README's lngru name
     "encoder_b1 is not a parameter of OE's rlngru model"),
])
def test_a_missing_extra_or_misshapen_array_is_refused_by_name(tmp_path, change, message):
    params = their_params("rlngru", len(build_dictionary(CAPTIONS[:8])) + 2)
    change(params)
    path, *_ = write_model(tmp_path, params=params)
    with pytest.raises(ConfigError, match=message):
        import_oe.load_oe_model(path)


def test_bad_pickles_and_npz_are_refused_in_one_line(tmp_path):
    path, *_ = write_model(tmp_path, "lngru")
    with pytest.raises(ConfigError, match="offsets encoder_b1..b4: .* --encoder lngru|rlngru"):
        import_oe.load_oe_model(path)
    write_model(tmp_path, options={"method": "cosine", "abs": False})
    with pytest.raises(ConfigError, match="method='cosine', abs=False: not an order-embedding model"):
        import_oe.load_oe_model(path)
    write_model(tmp_path, encoder="lstm")
    with pytest.raises(ConfigError, match="options\\['encoder'\\] is 'lstm'"):
        import_oe.load_oe_model(path)
    write_model(tmp_path, options={"dim": "1024"})
    with pytest.raises(ConfigError, match="options\\['dim'\\] is '1024'; want a positive integer"):
        import_oe.load_oe_model(path)
    # a pickle that would run a command: refused before anything is called
    (tmp_path / "order.pkl").write_bytes(b"cos\nsystem\n(S'touch pwned'\ntR.")
    with pytest.raises(ConfigError, match="names os.system"):
        import_oe.load_oe_model(path)
    assert not (tmp_path / "pwned").exists()
    write_model(tmp_path)
    np.savez(tmp_path / "order", Wemb=np.array([object()], dtype=object))
    with pytest.raises(ConfigError, match="order.npz is not a readable .npz of arrays"):
        import_oe.load_oe_model(path)
    with pytest.raises(ConfigError, match="missing.pkl not found"):
        import_oe.load_oe_model(tmp_path / "missing")


def their_ranks(errors):
    """OE evaluation.py:49-116 t2i / i2t ranks (argsort), then their R@K, medr, meanr."""
    t2i = [np.where(np.argsort(errors[i]) == i // 5)[0][0] for i in range(errors.shape[0])]
    i2t = [np.where(np.argsort(errors[:, i]) // 5 == i)[0][0] for i in range(errors.shape[1])]
    stats = lambda r: [100.0 * np.mean(np.array(r) < k) for k in (1, 5, 10)] + [np.floor(np.median(r)) + 1,
                                                                                  np.mean(r) + 1]
    return stats(i2t), stats(t2i)


def test_the_command_scores_their_model_as_their_evaluation_does(tmp_path, capsys):
    path, params, worddict, n_words = write_model(tmp_path)
    data = tmp_path / "coco"
    data.mkdir()
    rng = np.random.default_rng(5)
    captions = [""]  # distinct captions, so no two errors tie (OE's argsort and our pessimistic ranks agree)
    while len(captions) < 60:  # 12 images
        words = " ".join(rng.choice(["a", "dog", "cat", "on", "grass", "car", "Red", "zebra"], rng.integers(1, 7)))
        captions += [words] if words not in captions else []
    (data / "images" / "10crop").mkdir(parents=True)  # coco.zip's layout (OE datasets.py:26-32)
    (data / "test.txt").write_text("\n".join(captions) + "\n", encoding="utf-8")
    ims = rng.random((12, IMAGE)).astype(np.float32)
    np.save(data / "images" / "10crop" / "test.npy", ims)
    out = tmp_path / "result.json"
    assert import_oe.main(["--model", str(path), "--data-root", str(data), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    s = np.stack([their_caption(params, "rlngru", their_ids(c, worddict, n_words)) for c in captions])
    errors = (np.maximum(0.0, s[:, None, :] - their_image(params, ims)[None]) ** 2).sum(-1)  # model.py:32-36
    caption, image = their_ranks(errors)
    got = result["metrics"]
    for side, theirs in (("caption", caption), ("image", image)):
        assert [got[f"{side}_{k}"] for k in ("r1", "r5", "r10", "medr", "meanr")] == pytest.approx(theirs, abs=1e-9)
    assert (result["model"], result["encoder"], result["norm"], result["caption_eos"]) == ("order", "rlngru", "rmsnorm", True)
    assert str(tmp_path) not in out.read_text()  # file names and hashes, no folder of this machine
    printed = capsys.readouterr().out
    assert "one fold of 12 images" in printed and "| caption retrieval, paper (RMSNorm) | 48.7 | 79.7 | 89.5 | 5.3 |" in printed
    assert "Ties among the errors" not in printed  # distinct captions: no tie, one number
    # bad input: one line on stderr, exit 2
    assert import_oe.main(["--model", str(path), "--data-root", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("import_oe: --data-root: ") and "test_caps.txt not found" in err and "\n" not in err
    np.save(data / "images" / "10crop" / "test.npy", ims[:, :5])
    assert import_oe.main(["--model", str(path), "--data-root", str(data)]) == 2
    assert "test.npy has 5 features per image; the model maps 7" in capsys.readouterr().err


def test_caption_eos_in_the_suites_own_vocabulary(tmp_path):
    (tmp_path / "train_caps.txt").write_text("\n".join(["a dog", "a cat", "", "dog dog", "a"]) + "\n")
    for name in ("train", "dev", "test"):
        if name != "train":
            (tmp_path / f"{name}_caps.txt").write_text("a zebra\n" * 5)
        np.save(tmp_path / f"{name}_ims.npy", np.zeros((1, 3), np.float32))
    with_eos = load_coco({"root": str(tmp_path), "vocab_size": 4}, caption_eos=True)
    assert with_eos.vocab == ["<pad>", "<unk>", "<eos>", "a"]
    assert [c.tolist() for c in with_eos.splits["train"].captions] == [[3, 1, 2], [3, 1, 2], [2], [1, 1, 2], [3, 2]]
    without = load_coco({"root": str(tmp_path), "vocab_size": 4})
    assert without.vocab == ["<pad>", "<unk>", "a", "dog"]
    assert [c.tolist() for c in without.splits["train"].captions] == [[2, 3], [2, 1], [1], [3, 3], [2]]


def test_caption_eos_is_the_recipes_at_paper_scale_and_off_at_mini():
    from omegaconf import OmegaConf
    from runner_fixtures.helpers import compose_cfg

    from rmsnorm_repro.tasks.retrieval.task import RetrievalTask

    assert compose_cfg(["task=retrieval", "scale=paper"]).task.caption_eos is True
    assert compose_cfg(["task=retrieval", "scale=mini"]).task.caption_eos is False  # results/mini as made
    with pytest.raises(ValueError, match="task.caption_eos must be true or false, got 'yes'"):
        RetrievalTask.check_config(OmegaConf.create({"task": {"caption_eos": "yes"}}))


def test_training_batches_end_every_caption_with_eos():
    from omegaconf import OmegaConf

    from rmsnorm_repro.norms import build_normalization
    from rmsnorm_repro.tasks.retrieval.task import RetrievalTask

    synthetic = dict(seed=3, objects=12, objects_per_image=3, min_named=2, feature_dim=8, noise=0.3,
                     train_images=40, valid_images=10, test_images=10)
    cfg = OmegaConf.create({"seed": 1, "data": {"name": "synthetic"}, "train": {"batch_size": 16},
                            "task": {"model": {"word_dim": 4, "dim": 8}, "margin": 0.05, "eval_batch_size": 8,
                                     "caption_eos": True, "synthetic": synthetic}})
    task = RetrievalTask(cfg, build_normalization("rmsnorm"), torch.device("cpu"))
    assert task.data.vocab[2] == "<eos>" and task.data.vocab[3] == "a"
    batch = task.train_batch(0)
    last = batch["mask"].sum(1) - 1
    assert torch.all(batch["tokens"].gather(1, last[:, None]) == 2) and int((batch["tokens"] == 2).sum()) == 16


def test_table7_shows_the_authors_model_where_import_oe_left_its_result(tmp_path):
    import yaml
    from runner_fixtures.fake_runs import write_run

    from rmsnorm_repro.report import aggregate, tables

    path, *_ = write_model(tmp_path)
    coco = tmp_path / "coco"
    coco.mkdir()
    captions = ["a dog", "a cat", "dog on grass", "cat on a car", "red car"] * 2
    (coco / "test_caps.txt").write_text("\n".join(c + f" {i}" for i, c in enumerate(captions)) + "\n")
    np.save(coco / "test_ims.npy", np.random.default_rng(2).random((2, IMAGE)).astype(np.float32))
    run = write_run(tmp_path / "runs", "retrieval", "rmsnorm", 1, final={"caption_r1": 40.0, "image_r1": 30.0})
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "data": {"name": "coco", "root": str(coco)}}))
    page = lambda: tables.render_page("table7", aggregate.load_runs(tmp_path / "runs"), "runs", {}, tmp_path)
    assert "the authors' model" not in page()  # nothing there yet
    assert import_oe.main(["--model", f"{path}.npz", "--data-root", str(coco)]) == 0  # default --out: the data folder
    result = json.loads((coco / import_oe.RESULT_FILE).read_text())["metrics"]
    row = next(line for line in page().splitlines() if "the authors' model" in line)
    ours = " / ".join(f"{result[f'caption_{k}']:.1f}" for k in ("r1", "r5", "r10", "meanr"))
    assert row.startswith("| RMSNorm: the authors' model (order.npz, OE rlngru), scored here | their weights, 2 test images |")
    assert f"| 48.7 / 79.7 / 89.5 / 5.3 | {ours} |" in row
    (coco / import_oe.RESULT_FILE).write_text('{"model": "order"}')
    row = next(line for line in page().splitlines() if "the authors' model" in line)
    assert "unreadable: authors_order_scores.json is not import_oe's result (KeyError" in row and str(tmp_path) not in row


def test_a_retrieval_run_recorded_before_caption_eos_reads_as_without_it():
    from rmsnorm_repro.record import filled_config

    old = {"task": {"name": "retrieval", "margin": 0.05}, "norm": {"name": "rmsnorm"}}
    assert filled_config(old, {})["task"]["caption_eos"] is False
    assert filled_config({**old, "task": {"name": "retrieval", "caption_eos": True}}, {})["task"]["caption_eos"] is True


# Damaged and hostile files (reliability audit at f15a5c5) ------------------------------------------------
def write_test_split(data, n_images=2, layout="coco.zip", features=None):
    """A COCO test split of distinct captions in coco.zip's layout or as test_caps.txt / test_ims.npy."""
    captions = [f"a dog {i}" for i in range(5 * n_images)]
    features = np.random.default_rng(4).random((n_images, IMAGE)).astype(np.float32) if features is None else features
    if layout == "coco.zip":
        (data / "images" / "10crop").mkdir(parents=True, exist_ok=True)
        (data / "test.txt").write_text("\n".join(captions) + "\n")
        np.save(data / "images" / "10crop" / "test.npy", features)
    else:
        data.mkdir(parents=True, exist_ok=True)
        (data / "test_caps.txt").write_text("\n".join(captions) + "\n")
        np.save(data / "test_ims.npy", features)
    return features


def test_a_nan_in_their_weights_or_the_features_is_refused_not_scored_as_perfect(tmp_path, capsys):
    """One NaN in ff_image_W gave R@1/5/10 = 100 and mean rank 1, written to authors_order_scores.json."""
    params = their_params("rlngru", len(build_dictionary(CAPTIONS[:8])) + 2)
    params["ff_image_W"][3, 2] = np.nan
    path, *_ = write_model(tmp_path, params=params)
    data = tmp_path / "coco"
    write_test_split(data)
    assert import_oe.main(["--model", str(path), "--data-root", str(data)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"import_oe: {tmp_path / 'order.npz'}: ff_image_W holds 1 NaN or inf value: not a trained model's"
    assert not (data / import_oe.RESULT_FILE).exists()
    write_model(tmp_path)
    features = write_test_split(data)
    features[1, 0] = np.inf
    np.save(data / "images" / "10crop" / "test.npy", features)
    assert import_oe.main(["--model", str(path), "--data-root", str(data)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "test.npy holds NaN or inf in 1 of 2 image rows" in err
    assert not (data / import_oe.RESULT_FILE).exists()
    (data / import_oe.RESULT_FILE).write_text(json.dumps({  # a result written before: its NaN is not shown as a score
        "model": "order", "norm": "rmsnorm", "encoder": "rlngru", "caption_eos": True, "test_images": 2,
        "metrics": {**{key: 1.0 for key in import_oe.METRICS}, "caption_r1": float("nan")}}))
    with pytest.raises(ValueError, match="is not import_oe's result \\(ValueError: a metric is NaN or inf"):
        import_oe.read_result(data / import_oe.RESULT_FILE)


def test_a_truncated_npz_is_one_line(tmp_path):
    path, *_ = write_model(tmp_path)
    npz = tmp_path / "order.npz"
    npz.write_bytes(npz.read_bytes()[:300])
    with pytest.raises(ConfigError, match="order.npz is not a readable .npz of arrays \\(BadZipFile"):
        import_oe.load_oe_model(path)


@pytest.mark.timeout(60)
def test_a_deep_or_self_repeating_pickle_is_refused_at_once(tmp_path):
    """A 100k-deep list raised RecursionError; a list nested 40 deep whose levels hold the same object twice
    (336 bytes) expanded to 2^40 nodes: a hang (import_oe._text)."""
    import pickle
    import time

    deep = b"(l" * 100_000 + b"a" * 99_999 + b"."
    (tmp_path / "order.pkl").write_bytes(deep)
    with pytest.raises(ConfigError, match="order.pkl is not OE's model pickle: nested deeper than"):
        import_oe.read_oe_pickle(tmp_path / "order.pkl")
    shared = []
    for _ in range(40):
        shared = [shared, shared]
    (tmp_path / "order.pkl").write_bytes(pickle.dumps(shared, protocol=0))
    assert len((tmp_path / "order.pkl").read_bytes()) < 1000
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="order.pkl is not OE's model pickle"):
        import_oe.read_oe_pickle(tmp_path / "order.pkl")
    assert time.perf_counter() - start < 5.0


def test_coco_zip_files_come_first_and_the_result_names_the_feature_file(tmp_path, caplog, capsys):
    """Features built with scripts/extract_coco_features.py beside coco.zip's (test_ims.npy) were scored with
    the authors' Caffe-trained projection silently, and the result named no feature file (fidelity audit)."""
    path, *_ = write_model(tmp_path)
    both, theirs = tmp_path / "both", tmp_path / "theirs"
    features = write_test_split(both)
    write_test_split(theirs, features=features)
    write_test_split(both, layout="ours", features=features[::-1].copy())  # the images swapped
    for folder in (both, theirs):
        assert import_oe.main(["--model", str(path), "--data-root", str(folder)]) == 0
    a, b = (json.loads((f / import_oe.RESULT_FILE).read_text()) for f in (both, theirs))
    assert a["metrics"] == b["metrics"]
    assert a["metrics"]["rsum"] < a["metrics"]["rsum_optimistic"]  # ten captions of two images: ties
    assert "Ties among the errors: the numbers above count them against the model" in capsys.readouterr().out
    assert (a["captions"], a["features"]) == ("test.txt", "images/10crop/test.npy")
    digest = __import__("hashlib").sha256((theirs / "images" / "10crop" / "test.npy").read_bytes()).hexdigest()
    assert a["features_sha256"] == b["features_sha256"] == digest
    assert import_oe.read_result(both / import_oe.RESULT_FILE)["features"] == "images/10crop/test.npy"
    only_ours = tmp_path / "ours"
    write_test_split(only_ours, layout="ours")
    assert import_oe.main(["--model", str(path), "--data-root", str(only_ours)]) == 0
    assert json.loads((only_ours / import_oe.RESULT_FILE).read_text())["features"] == "test_ims.npy"
    with caplog.at_level("INFO"):
        read_coco_split(both, "test")
    assert "both coco.zip's test.txt, images/10crop/test.npy and test_caps.txt, test_ims.npy" in caplog.text
