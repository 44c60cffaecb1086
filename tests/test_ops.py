"""Per-operator work against hand-derived values (reference §3-§4): FLOPs and bytes per
token at 4K context, dispatch/combine bytes per die at EP320, buffer memory of Eq. 1-2."""

import numpy as np
import pytest

from cmperf.cost.ops import (combine_message_B, dense_ffn_op, dispatch_message_B, attention_decode_ops,
                             attention_prefill_ops, moe_ops, placement)
from cmperf.schedule.memory import buffer_bytes

H = 7168
W_UK = W_UV = 512 * 128 * 128
EXPERT = 3 * H * 2048


def test_decode_mla_per_token_at_4k(model):
    prolog, core, o_proj = attention_decode_ops(model, T=1.0, R=1.0, L=4096)
    assert prolog.flops == 2 * (H * 1536 + 1536 * 128 * 192 + H * 576 + W_UK)  # 122,552,320
    assert prolog.weight_bytes == H * 1536 + 1536 * 128 * 192 + H * 576 + W_UK  # INT8: 1 B/weight
    assert core.flops == 2 * 128 * (576 + 512) * 4096  # scores over 576 dims, output over 512
    kv_read = 4096 * 576 * 2  # BF16 latent cache of one request, read once
    assert core.hbm_bytes == pytest.approx(kv_read + 128 * (576 + 512) * 2)
    assert o_proj.flops == 2 * (W_UV + 128 * 128 * H)
    # one request, two tokens (MTP): the cache is read once, the work doubles
    _, core2, _ = attention_decode_ops(model, T=2.0, R=1.0, L=4096)
    assert core2.flops == 2 * core.flops
    assert core2.hbm_bytes - 2 * 128 * (576 + 512) * 2 == pytest.approx(kv_read)


def test_prefill_mha_per_token_at_4k(model):
    down, gather, up, core, a2a, o_proj = attention_prefill_ops(model, T=4096.0, P=4096, tp=4)
    assert down.flops == 2 * 4096 * (H * 1536 + H * 576)
    assert up.flops == 2 * 4096 * (1536 * 128 * 192 + 512 * 128 * 256)
    # causal: token i attends to i keys; sum over i = P (P + 1) / 2
    assert core.flops == pytest.approx(2 * 128 * (192 + 128) * 4096 * 4097 / 2)
    assert o_proj.flops == 2 * 4096 * 128 * 128 * H
    # SP -> TP: every die receives the compressed q/kv (1536 + 576 BF16) of the 3 other dies
    assert gather.net_bytes == pytest.approx(3 * 4096 * (1536 + 576) * 2)
    # TP -> SP: 3/4 of the attention outputs (128 heads x 128, BF16) leave the die
    assert a2a.net_bytes == pytest.approx(4096 * 0.75 * 128 * 128 * 2)


def test_dense_ffn_per_token(model):
    op = dense_ffn_op(model, 1.0)
    assert op.flops == 2 * 3 * H * 18432


def test_message_sizes(model):
    assert dispatch_message_B(model) == 7680  # 7,168 INT8 + 4 B scale, padded to 512 B = 7.5 KiB
    assert combine_message_B(model) == 14336  # BF16 = 14 KiB


def _decode_moe(model, specs, T):
    hw, m = specs.views()
    pl = placement(m, T, 320, 32, 32, 1.0, 128)
    return pl, moe_ops(m, T, 320, pl)


def test_ep320_placement_one_expert_per_die(model, specs):
    pl, _ = _decode_moe(model, specs, 48.0)
    assert float(pl.instances_per_die) == 1.0  # (256 + 32 + 32) / 320
    # busiest die: a shared-expert copy serving 320 dies x 48 tokens / 32 copies = 480 rows
    # (a routed die gets 48 x 320 x 8 / 288 = 426.7)
    assert float(pl.rows) == pytest.approx(480.0)
    assert bool(pl.shared_remote)


def test_dispatch_combine_bytes_per_die_ep320_batch96(model, specs):
    # batch 96 per NPU = 48 requests per die; with MTP each sends 2 tokens: 96 tokens per die
    T = 96.0
    pl, (gate, dispatch, experts, combine) = _decode_moe(model, specs, T)
    fanout = 8 * 319 / 320 + 1  # 8 routed experts, 1/320 of them local, + the remote shared copy
    sent = T * fanout
    received = 96 * 320 / 32 * 319 / 320  # the shared-expert die receives from all others
    assert float(dispatch.net_messages) == pytest.approx(sent)
    assert float(dispatch.net_bytes) == pytest.approx(max(sent, received) * 7680)
    assert float(combine.net_bytes) == pytest.approx(max(sent, received) * 14336)
    assert float(dispatch.net_bytes) == pytest.approx(7.35e6, rel=0.01)  # ~7.4 MB per die per layer
    assert float(experts.flops) == pytest.approx(2 * 960 * EXPERT)


def test_dispatch_combine_buffers_645_mib(model):
    # paper Eq. 1-2 at EP320 and 96 tokens per die: 96 x 320 x (7.5 KiB + 14 KiB)
    b = float(buffer_bytes(model, 96, 320))
    assert b == 96 * 320 * (7680 + 14336) == 676_331_520
    assert b / 2**20 == pytest.approx(645, abs=1)  # the paper's "MB" are MiB


def test_prefill_placement_ten_experts_per_die(model, specs):
    hw, m = specs.views()
    pl = placement(m, 8192.0, 32, 32, 32, 1.0, 128)
    assert float(pl.instances_per_die) == 10.0  # 8 routed + 1 redundant + 1 shared
    assert not bool(pl.shared_remote)  # one shared copy on every die: served locally
    # 9 routed instances x (8192 x 32 x 8 / 288 tokens) + 8192 shared rows
    assert float(pl.rows) == pytest.approx(9 * 8192 * 32 * 8 / 288 + 8192)


def test_imbalance_scales_routed_rows_only(model, specs):
    hw, m = specs.views()
    a = placement(m, 8192.0, 32, 32, 32, 1.0, 128)
    b = placement(m, 8192.0, 32, 32, 32, 1.5, 128)
    assert float(b.rows - a.rows) == pytest.approx(0.5 * 9 * 8192 * 32 * 8 / 288)


def test_moe_ops_per_token(model, specs):
    # one token routed to 8 experts + 1 shared on a die holding one instance
    from cmperf.cost.ops import Placement
    one = Placement(instances_per_die=np.asarray(1.0), rows=np.asarray(9.0), padded_rows=np.asarray(128.0),
                    shared_remote=np.asarray(True), remote_routed_fraction=np.asarray(1.0))
    gate, dispatch, experts, combine = moe_ops(model, 1.0, 320, one)
    assert gate.flops == 2 * 256 * H  # BF16 router
    assert float(experts.flops) == 2 * 9 * EXPERT
    assert float(experts.weight_bytes) == EXPERT  # one INT8 instance read per microbatch
    assert float(experts.tile_efficiency) == pytest.approx(9 / 128)  # M padded to one 128-row tile
    assert float(dispatch.net_messages) == 9  # 8 routed + 1 shared, all remote
    assert float(combine.net_bytes) == 9 * 14336


def test_dense_ffn_bytes_per_token(model):
    op = dense_ffn_op(model, 1.0)
    weights = 3 * H * 18432
    activations = H * 1 + 2 * 18432 * 2 + 18432 * 1 + H * 2  # INT8 in, BF16 gate/up out, INT8 down in, BF16 out
    assert op.hbm_bytes == weights + activations
    # the SwiGLU between them is a kernel of its own: gate/up read back, the INT8 down input written
    from cmperf.cost.ops import activation_op
    assert activation_op(model, 1.0, 18432).hbm_bytes == 2 * 18432 * 2 + 18432 * 1


def test_mtp_entry_projection(model):
    from cmperf.cost.ops import mtp_proj_op

    op = mtp_proj_op(model, 1.0)
    assert op.flops == 2 * (2 * H) * H  # [hidden; embedding] (2h) -> h, one token
    assert op.weight_bytes == 2 * H * H  # INT8


def test_experts_read_every_instance_they_hold(model, specs):
    """EP32: 10 instances per die (8 routed + 1 redundant + 1 shared), each read once per
    microbatch, plus the activations of the rows they serve."""
    hw, m = specs.views()
    pl = placement(m, 4096.0, 32, 32, 32, 1.0, 128)
    experts = moe_ops(m, 4096.0, 32, pl)[2]
    rows = 9 * 4096 * 32 * 8 / 288 + 4096
    activations = rows * (H * 1 + 2 * 2048 * 2 + 2048 * 1 + H * 2)  # the SwiGLU's own read: activation_op
    assert float(experts.weight_bytes) == 10 * EXPERT
    assert float(experts.hbm_bytes) == pytest.approx(10 * EXPERT + activations)


def test_every_op_reads_its_weights(specs):
    """Structure: no op streams fewer HBM bytes than the weights it holds."""
    from cmperf.predict import predict

    for phase, values in (("decode", {"batch": [8, 96], "ep": [32, 320], "dies": 320}), ("prefill", {})):
        r = predict(phase, values, specs, strict=False)
        for row in range(len(r.table)):
            ops, _ = r.breakdown(row)
            assert (ops["hbm_bytes"] >= ops["weight_bytes"] * (1 - 1e-12)).all()


def _gemm_flops(op):
    gemms = (op.gemm,) if not isinstance(op.gemm, tuple) else op.gemm
    return sum(float(np.sum(2 * np.asarray(g.groups) * np.asarray(g.m) * np.asarray(g.n) * np.asarray(g.k))) for g in gemms)


@pytest.mark.parametrize("name", ["deepseek-r1", "llama-3.1-70b", "qwen3-30b-a3b"])
def test_gemm_shapes_carry_the_ops_flops(name):
    """Every matmul operator names the GEMMs it runs (docs/model.md §3, timed tile by tile):
    their 2 x groups x M x N x K add up to the op's FLOPs, MLA, GQA, TP > 1 and a cached
    prefix included; the experts' grouped GEMM runs its rows padded to whole tiles."""
    from cmperf.cost.ops import head_op, mtp_proj_op
    from cmperf.specs.loader import load_model

    m, _ = load_model(name)
    ops = (attention_decode_ops(m, T=24.0, R=12.0, L=4096, tp=2.0) + attention_prefill_ops(m, T=512.0, P=4096, tp=4.0, cached=1024.0)
           + [head_op(m, 24.0)])
    if m.dense_ffn is not None:
        ops.append(dense_ffn_op(m, 24.0, tp=2.0))
    if name == "deepseek-r1":
        ops.append(mtp_proj_op(m, 24.0))
    matmuls = [o for o in ops if o.flop_kind == "matmul" and np.any(np.asarray(o.flops) > 0)]
    assert matmuls and all(o.gemm is not None for o in matmuls)
    for o in matmuls:
        assert _gemm_flops(o) == pytest.approx(float(np.sum(o.flops)), rel=1e-12), o.name
    if m.moe is not None:
        pl = placement(m, 96.0, 32.0, 32, 32, 1.0, 128)
        gate, _, experts, _ = moe_ops(m, 96.0, 32.0, pl)
        assert _gemm_flops(gate) == pytest.approx(float(gate.flops), rel=1e-12)
        padded = float(pl.padded_rows)
        assert padded > float(pl.rows)
        assert _gemm_flops(experts) == pytest.approx(float(experts.flops) * padded / float(pl.rows), rel=1e-12)
