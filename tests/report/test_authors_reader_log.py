"""The authors' reader log (stats_lstm_s1.npz.pkl) read from a file written the way Python 2's cPickle
(protocol 0) writes Cooijmans' `stats = defaultdict(list)` of numpy floats, byte by byte: STRING opcodes
for keys and scalar bytes, numpy.core.multiarray.scalar, __builtin__.list; and drawn on Figure 5 beside
our runs when it lies in the CNN folder they read."""
from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest
import yaml
from matplotlib.figure import Figure

from rmsnorm_repro.report import aggregate, figures
from rmsnorm_repro.report.authors_reader_log import FILE_NAME, read_valid_errors
from runner_fixtures.fake_runs import write_run


def _py2_string(data: bytes) -> bytes:
    return b"S'" + b"".join(b"\\x%02x" % b for b in data) + b"'\n"


def _py2_float64(value: float) -> bytes:
    """cPickle protocol 0 of a numpy.float64 under numpy 1.x: scalar(dtype('f8'), <8 bytes>)."""
    return (b"cnumpy.core.multiarray\nscalar\n(cnumpy\ndtype\n(S'f8'\nI0\nI1\ntR(I3\nS'<'\nNNNI-1\nI-1\nI0\ntb"
            + _py2_string(struct.pack("<d", value)) + b"tR")


def write_stats(path, stats: dict[str, list[float]]) -> None:
    out = b"ccollections\ndefaultdict\n(c__builtin__\nlist\ntR"
    for key, values in stats.items():
        out += _py2_string(key.encode()) + b"(l" + b"".join(_py2_float64(v) + b"a" for v in values) + b"s"
    path.write_bytes(out + b".")


def test_the_hand_written_stream_is_what_python2_wrote(tmp_path):
    """The writer above against the standard library's reading of it (a defaultdict of numpy floats)."""
    write_stats(tmp_path / "s.pkl", {"valid_errs": [0.61, 0.5]})
    loaded = pickle.loads((tmp_path / "s.pkl").read_bytes(), encoding="latin1")
    assert loaded.default_factory is list and loaded["valid_errs"] == [0.61, 0.5]
    assert all(type(v) is np.float64 for v in loaded["valid_errs"])


def test_valid_errors_by_update(tmp_path):
    path = tmp_path / "stats_lstm_s1.npz.pkl"
    write_stats(path, {"train_err_ave": [0.9, 0.8, 0.7], "valid_errs": [0.62, 0.55, 0.49], "valid_costs": [2.0, 1.8, 1.7]})
    assert read_valid_errors(path) == [(1000, 0.62), (2000, 0.55), (3000, 0.49)]
    assert read_valid_errors(path, valid_every=500)[-1] == (1500, 0.49)


@pytest.mark.parametrize("content", [
    b"cos\nsystem\n(S'echo hi'\ntR.",                         # names a function: refused, never called
    pickle.dumps({"train_err_ave": [0.1]}, protocol=0),       # no valid_errs
    b"not a pickle",
])
def test_anything_else_is_one_clear_error(tmp_path, content):
    path = tmp_path / "stats.pkl"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"is not the authors' reader log") as info:
        read_valid_errors(path)
    assert "\n" not in str(info.value)


def test_figure5_draws_the_authors_curve_when_their_log_is_in_the_cnn_folder_our_runs_read(tmp_path):
    cnn = tmp_path / "cnn"
    cnn.mkdir()
    run = write_run(tmp_path / "runs", "reader", "rmsnorm", 1, steps=20, curve={"error": [0.7, 0.6]})
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "data": {"name": "cnn", "root": str(cnn)}}))
    runs = aggregate.load_runs(tmp_path / "runs")
    groups = aggregate.group_runs(runs)
    assert not figures._authors_reader_log(Figure().subplots(), groups)  # no log there: nothing drawn
    write_stats(cnn / FILE_NAME, {"valid_errs": [0.6, 0.5]})
    ax = Figure().subplots()
    assert figures._authors_reader_log(ax, groups)
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [1000, 2000] and list(line.get_ydata()) == [0.6, 0.5]
    assert "authors' RMSNorm" in line.get_label()
    assert figures.draw("fig5", runs, tmp_path / "fig5.png") is not None
