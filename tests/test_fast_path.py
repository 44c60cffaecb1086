"""A warm prediction answers exactly as a first one (issue 24: the Python API's kept stage
constants, fused-kernel runs, weights per die and spec views; cmperf/specs/view.py ``remember``).

The matrix (every system x model, decode and prefill at their defaults) is walked in one process:
each question first on the uncached path (``uncached()``: nothing kept, nothing reused), then
twice on the warm path (the second call reads only what the first kept); every output must be
the same to the last bit. A what-if after a warm call must change the answer as a fresh process
would: a kept value belongs to the views of the specs it was derived from."""

from __future__ import annotations

import numpy as np
import pytest

from cmperf.errors import CmperfError
from cmperf.predict import load_specs, predict, system_model
from cmperf.specs.loader import list_builtin
from cmperf.specs.view import uncached

SYSTEMS = [n for n, _ in list_builtin("system")]
MODELS = [n for n, _ in list_builtin("model")]


def _answer(phase, values, specs):
    """The prediction's columns (or the error it raises), for comparison."""
    try:
        r = predict(phase, values, specs, strict=False)
    except CmperfError as e:
        return f"error: {e}"
    return {c: np.asarray(r.columns[c]) for c in r.columns.columns}


def _same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return a.keys() == b.keys() and all(
        a[c].shape == b[c].shape and (np.array_equal(a[c], b[c], equal_nan=True) if a[c].dtype.kind in "fc"
                                      else np.array_equal(a[c], b[c])) for c in a)


def test_warm_calls_answer_as_the_uncached_path_on_every_system_and_model():
    """Decode on every system x model; prefill on every system with its own model and on
    CloudMatrix384 with every model (its kernels are the decode's, timed on other shapes)."""
    differ, compared = [], 0
    for system in SYSTEMS:
        for model in MODELS:
            try:
                specs = load_specs(system, model)
            except CmperfError:
                continue
            prefill = system == "cloudmatrix384" or model == system_model(system)
            for phase in ("decode", "prefill") if prefill else ("decode",):
                values = {}
                with uncached():
                    first = _answer(phase, values, specs)
                warm = [_answer(phase, values, specs) for _ in range(2)]
                compared += 1
                if not all(_same(first, w) for w in warm):
                    differ.append(f"{system} x {model} {phase} {values}")
    assert compared > 180 and not differ, differ


def test_a_what_if_after_a_warm_call_changes_the_answer():
    """A --set (new specs) and a sweep after warm calls on the defaults: each answers as on
    the uncached path; more HBM bandwidth never makes decode slower, less never faster (its
    weights and KV are read from HBM every step)."""
    for _ in range(3):
        base = predict("decode", {"batch": 64}).columns["tpot_ms"][0]
    path = "chip.die.hbm_bandwidth_Bps"  # the file's: 1.6e12
    tpot = {}
    for bw in (1.0e12, 3.2e12):
        specs = load_specs(sets=[f"{path}={bw:g}"])
        warm = [predict("decode", {"batch": 64}, specs).columns["tpot_ms"][0] for _ in range(2)]
        with uncached():
            fresh = predict("decode", {"batch": 64}, specs).columns["tpot_ms"][0]
        assert warm == [fresh, fresh]
        tpot[bw] = fresh
    swept = predict("decode", {"batch": 64}, load_specs(), sweeps={path: [1.0e12, 3.2e12]}).columns["tpot_ms"]
    assert list(swept) == [tpot[1.0e12], tpot[3.2e12]]
    assert tpot[3.2e12] < base < tpot[1.0e12]
    assert predict("decode", {"batch": 64}).columns["tpot_ms"][0] == base  # the defaults' answer is untouched


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_one_row_equals_its_row_of_a_grid(phase):
    """The one-row path (numpy scalars, one-row tables of operators) and the vectorised grid
    (arrays over the rows) give each configuration the same numbers, to rounding (numpy's array loops
    of exp, log and power may round the last bit unlike its scalar ones)."""
    key, values = ("batch", [1, 8, 64, 160]) if phase == "decode" else ("prompt_len", [256, 1024, 4096])
    specs = load_specs()
    grid = predict(phase, {key: values}, specs).columns
    for i, v in enumerate(values):
        one = predict(phase, {key: v}, specs).columns
        for c in one.columns:
            if one[c].dtype.kind in "fc":
                np.testing.assert_allclose(one[c], grid[c][i:i + 1], rtol=1e-12, atol=0, err_msg=f"{v} {c}")


@pytest.mark.parametrize("system", ["cloudmatrix384", "h100-cluster"])
def test_a_layer_timed_as_one_table_equals_its_ops_timed_one_by_one(system):
    """A MoE layer's stages are one evaluation over a table of operators (docs/model.md §3, on
    each stream's shares of the cores): every operator's terms are those it has timed alone,
    on a grid (arrays over the rows) and on one row (numbers); tiled GEMMs, untiled kernels
    and collectives mixed in one table, each stage on its own shares."""
    from cmperf.cost.collectives import route_of
    from cmperf.cost.ops import moe_ops, placement
    from cmperf.cost.roofline import op_time
    from cmperf.schedule.common import timed_parts
    from cmperf.schedule.decode import attention_ops
    from cmperf.specs.view import HardwareView

    specs = load_specs(system)
    for batch in ([8.0, 96.0], 64.0):
        cols = predict("decode", {"batch": batch}, specs).columns.arrays()
        g = {k: v if np.ndim(batch) else v[0] for k, v in cols.items() if v.dtype.kind in "fbiu"}  # one row: numbers
        hw, m = specs.views()
        hw = HardwareView(hw.system, hw.chip, hw.stack)  # no fusion: one kernel per op
        T = np.asarray(g["batch"], dtype=float) / hw.chip.dies_per_package
        pl = placement(m, T, g["ep"], g["redundant_experts"], g["shared_copies"], g["expert_imbalance"],
                       hw.chip.efficiency.matmul_tile_rows)
        attn = attention_ops(hw, m, g, T, T)
        moe = list(moe_ops(m, T, g["ep"], pl, route_of(hw, "decode")))
        shares = (2 / 3, 1 / 3)
        tables = timed_parts([(attn, shares[0], shares[0]), (moe, shares[1], shares[1])], hw)
        for table, ops, share in zip(tables, (attn, moe), shares):
            for i, op in enumerate(ops):
                alone = op_time(op, hw, share, share)
                for f in ("compute_s", "vector_s", "memory_s", "network_s", "latency_s", "pool_compute_s",
                          "time_s", "load_s"):
                    np.testing.assert_allclose(np.broadcast_to(getattr(table, f)[i], np.shape(alone.time_s)),
                                               getattr(alone, f), rtol=1e-15, atol=0, err_msg=f"{system} {op.name} {f}")


@pytest.mark.parametrize("phase, values", [
    ("decode", {"batch": [8, 96], "microbatches": [0, 1, 2]}),
    ("prefill", {"prompt_len": [1024, 4096], "microbatches": [1, 2, 0]}),
    ("afd", {"batch": [16, 96], "microbatches": [4, 1, 0]}),
])
def test_rows_of_several_microbatch_counts_answer_as_each_alone(phase, values):
    """A grid that repeats its rows for each microbatch count evaluates their schedules once
    (predict.microbatch_blocks): every row, and its --breakdown, is that configuration's own
    prediction to the last bit, in the grid's order."""
    specs = load_specs()
    grid = predict(phase, values, specs)
    assert grid.schedule_rows is not None  # the shared evaluation was taken
    keys = list(values)
    for i in range(len(grid.columns)):
        one = predict(phase, {k: grid.columns[k].iat[i].item() for k in keys}, specs)
        assert _same({c: np.asarray(one.columns[c]) for c in one.columns.columns},
                     {c: np.asarray(grid.columns[c])[i:i + 1] for c in grid.columns.columns}), i
        assert grid.breakdown_records(i) == one.breakdown_records(0), i


def test_single_calls_replayed_answer_as_the_uncached_path():
    """A loop of single calls (cmperf/schedule/replay.py: a structure traced on its third call,
    then replayed on each call's own numbers) answers as the uncached path, to the bit: decode
    over batches, lengths, acceptances and a chunk that switches on (a guard fails: the normal
    path), prefill over prompts and cached prefixes, AFD over batches (CloudMatrix384's); on an
    Ascend and an NVIDIA instance (whose GEMMs' block N is a guarded decision)."""
    import cmperf.schedule.replay as replay

    walks = {"decode": [{"batch": b, "kv_len": 512.0 * b, "mtp_acceptance": 0.1 * (b % 10)} for b in (1, 7, 33, 100, 255)]
             + [{"batch": 8, "chunk_tokens": 1024}, {"batch": 9, "chunk_tokens": 0}],
             "prefill": [{"prompt_len": p, "cached_len": c} for p, c in ((512, 0), (1000, 0), (4096, 1024), (8000, 0))],
             "afd": [{"batch": b} for b in (8, 16, 40, 96)]}
    replayed, differ = [], []
    run = replay.Trace.run

    def counted(self, inputs):
        out = run(self, inputs)
        replayed.append(1)
        return out

    replay.Trace.run = counted
    try:
        for system in ("cloudmatrix384", "h800-cluster"):
            specs = load_specs(system)
            for phase, walk in walks.items():
                if phase == "afd" and system != "cloudmatrix384":
                    continue  # (AFD's traces, four microbatch schedules, are the slowest to make)
                for values in walk:
                    with uncached():
                        first = _answer(phase, values, specs)
                    if not _same(first, _answer(phase, values, specs)):
                        differ.append(f"{system} {phase} {values}")
                with uncached():  # the last call's breakdown (a replayed call's: its schedules made when asked)
                    cold = predict(phase, walk[-2], specs).breakdown_records()
                if predict(phase, walk[-2], specs).breakdown_records() != cold:
                    differ.append(f"{system} {phase} {walk[-2]} breakdown")
    finally:
        replay.Trace.run = run
    assert not differ, differ
    assert len(replayed) >= 12  # the walks were replayed, not all answered by the normal path
