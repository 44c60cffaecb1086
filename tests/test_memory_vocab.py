"""The embedding and the LM head in memory follow the split the cost model times them with
(cmperf/cost/ops.py: vocab_tp, docs/model.md §7): vocab-parallel over the TP group in decode,
the head over the attention TP group in prefill (the embedding whole: each die embeds its own
tokens). Hand-derived at fixed parameters; memory never grows with TP."""

import numpy as np
import pytest

from cmperf.predict import load_specs, predict

H, L, V = 8192, 80, 128256  # Llama-3.1-70B (models/llama-3.1-70b.yaml), BF16
MATRICES = 2 * H * H + 2 * H * 1024 + 3 * H * 28672  # q, o; k, v (8 KV heads x 128); SwiGLU
NORMS = L * 2 * H  # two RMSNorms a layer on every die (the final norm's 16 KB is not counted)
TABLE_B = 2 * V * H  # the embedding table, and the head, in BF16


@pytest.fixture(scope="module")
def llama():
    return load_specs("h100-cluster", "llama-3.1-70b", [])


def test_decode_tp4_by_hand(llama):
    """TP 4: a quarter of every layer matrix, of the embedding table and of the head per
    die: 2 B x (80 x 855,638,016 / 4 + 1,310,720) + 2 x 2,101,346,304 / 4 = 35.279 GB (the
    whole embedding and head on every die would add 3.15 GB)."""
    t = predict("decode", {"dies": 4, "tp": 4, "batch": 8}, llama).table.iloc[0]
    hand = 2 * (L * MATRICES / 4 + NORMS) + 2 * TABLE_B / 4
    assert t["weights_per_die_bytes"] == pytest.approx(hand, rel=1e-9)
    assert t["weights_per_die_bytes"] == pytest.approx(35.2788e9, rel=1e-5)


def test_prefill_splits_the_head_and_keeps_the_embedding(llama):
    """Prefill at attention TP 4: the head is vocab-parallel over the group (a quarter per
    die), the embedding whole (sequence-parallel: each die looks up its own tokens). Halving
    the vocabulary (64,128 rows) removes 64,128 x 8192 x 2 B x (1 + 1/4) per die, and in
    decode at TP 4 x (1/4 + 1/4)."""
    half = load_specs("h100-cluster", "llama-3.1-70b", ["model.vocab_size=64128"])
    row = {"dies": 4, "attn_tp": 4, "tokens_per_npu": 4096}
    w, w_half = (predict("prefill", row, s).table["weights_per_die_bytes"].iat[0] for s in (llama, half))
    assert w - w_half == pytest.approx(64128 * H * 2 * (1 + 1 / 4), rel=1e-12)
    row = {"dies": 4, "tp": 4, "batch": 8}
    w, w_half = (predict("decode", row, s).table["weights_per_die_bytes"].iat[0] for s in (llama, half))
    assert w - w_half == pytest.approx(64128 * H * 2 * (1 / 4 + 1 / 4), rel=1e-12)


def test_timed_head_is_the_held_head(llama):
    """One split for time and memory: the LM head op the decode schedule times reads the
    weights memory holds for it, V x h / TP x 2 B, at every TP."""
    for tp in (1, 2, 8):
        r = predict("decode", {"dies": 8, "tp": tp, "batch": 8}, llama)
        ops = r.breakdown(0)[0]
        head = ops[ops["op"] == "lm_head"]["weight_bytes"]
        assert len(head) == 1 and float(head.iat[0]) == pytest.approx(TABLE_B / tp, rel=1e-12), tp


@pytest.mark.parametrize("system,model,phase,key", [
    ("h100-cluster", "llama-3.1-70b", "decode", "tp"),
    ("h100-cluster", "llama-3.1-70b", "prefill", "attn_tp"),
    ("cloudmatrix384", "deepseek-r1", "decode", "tp"),
    ("cloudmatrix384", "deepseek-r1", "prefill", "attn_tp"),
])
def test_weights_never_grow_with_tp(system, model, phase, key):
    """More dies in the TP group never hold more weight per die; the embedding and head's
    share falls at least as fast as 1/TP would take it from TP 1 (memory of the head never
    grows with TP). Llama's GQA cache splits with its 8 KV heads, so there a larger TP also
    never fits a smaller batch; MLA's latent is held whole by every die of the group (it
    fits fewer: not the head's doing)."""
    specs = load_specs(system, model, [])
    tps = [1, 2, 4, 8]
    base = {"dies": 16, **({"batch": 16} if phase == "decode" else {"tokens_per_npu": 16384})}
    t = predict(phase, rows=[{**base, key: tp} for tp in tps], specs=specs).table
    w = t["weights_per_die_bytes"].to_numpy()
    assert np.all(np.diff(w) <= 1e-6 * w[:-1]), w
    if phase == "decode" and model == "llama-3.1-70b":
        assert np.all(np.diff(t["max_batch_per_npu"].to_numpy()) >= 0)
