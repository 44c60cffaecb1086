"""The platforms beyond CloudMatrix384 (hardware/*.yaml) and the models beyond DeepSeek-R1
(models/*.yaml): that every system runs every model it can, that a combination it cannot run
is refused in one line, that broken spec files are refused with every problem named, and the
cost model's multi-platform physics against values worked out by hand.

Hand-derived values are written out in plain arithmetic from the numbers in the spec files
(read with a plain YAML parser, so a re-fit that rewrites a number moves the expectation with
it, while a bug in a formula still fails): DeepEP's hierarchical and chunked routes, the
DeepGEMM-style GEMM kernel on the H800, the KV cache of GQA against MLA, tensor parallelism's
weights and caches. Published anchors: DeepGEMM's M 64 N 7168 K 16384 FP8 GEMM, 336 TFLOPS, and
DeepEP's EP16 internode normal dispatch, 43 GB/s RDMA bottleneck bandwidth (both within the 15 %
tolerance of cmperf/reference/h800-microbenchmarks.yaml).
"""

import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import one_line_error

REPO = Path(__file__).resolve().parent.parent
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=None)
def spec(folder, name):
    return yaml.load((REPO / folder / f"{name}.yaml").read_text(), Loader=LOADER)


SYSTEMS = sorted(p.stem for p in (REPO / "hardware").glob("*.yaml") if spec("hardware", p.stem)["kind"] == "system")
CHIPS = sorted(p.stem for p in (REPO / "hardware").glob("*.yaml") if spec("hardware", p.stem)["kind"] == "chip")
MODELS = sorted(p.stem for p in (REPO / "models").glob("*.yaml"))
NEW_SYSTEMS = {"h800-cluster", "h100-cluster", "h20-cluster", "b200-cluster", "gb200-nvl72", "atlas-800t-a2"}
NEW_MODELS = {"deepseek-v3", "kimi-k2", "qwen3-235b-a22b", "qwen3-30b-a3b", "mixtral-8x7b", "llama-3.1-70b"}


def num(sourced):
    return float(sourced["value"])  # plain YAML reads '1979.0e12' as a string


def runnable(system, model):
    """Whether the system's chip has a matrix-unit peak in every dtype the model computes in
    (from the spec files alone)."""
    chip = spec("hardware", spec("hardware", system)["chip"])
    p = spec("models", model)["precision"]
    needed = {p["matmul"], p["attention"], p["head"], p.get("experts") or p["matmul"]}
    return needed <= set(chip["die"]["peak_flops_per_s"])


# --------------------------------------------------------------------------- listing
def test_the_new_systems_and_models_are_shipped():
    assert NEW_SYSTEMS <= set(SYSTEMS) and "cloudmatrix384" in SYSTEMS
    assert NEW_MODELS <= set(MODELS) and "deepseek-r1" in MODELS


def test_hw_list_shows_every_system_and_chip_with_its_confidence(cli):
    code, out, err = cli("hw", "list", "--format", "json")
    assert code == 0, err
    rows = {(r["kind"], r["name"]): r for r in json.loads(out)}
    for kind, names in (("system", SYSTEMS), ("chip", CHIPS)):
        for name in names:
            assert rows[(kind, name)]["confidence"] == spec("hardware", name)["confidence"]


def test_model_list_shows_every_model_with_a_confidence(cli):
    code, out, err = cli("model", "list", "--format", "json")
    assert code == 0, err
    rows = {r["quantity"]: r for r in json.loads(out)}
    assert set(MODELS) <= set(rows)
    assert all(rows[m]["confidence"] in ("high", "medium", "low") for m in MODELS)
    code, out, err = cli("model", "list")
    assert code == 0 and "confidence" in out and all(m in out for m in NEW_MODELS)


# --------------------------------------------------------------------------- every platform runs
# A Latin square: system i runs model i in decode and model i+3 in prefill, so every system and
# every model meets both phases in 14 runs (the full 7 x 7 x 2 would take seconds). One 8-die
# instance fits every system; no redundant experts, so EP8 divides every model's instances.
PAIRS = [("decode", s, MODELS[i % len(MODELS)]) for i, s in enumerate(SYSTEMS)] + \
        [("prefill", s, MODELS[(i + 3) % len(MODELS)]) for i, s in enumerate(SYSTEMS)]


@pytest.mark.parametrize("phase,system,model", PAIRS, ids=[f"{p}-{s}-{m}" for p, s, m in PAIRS])
def test_every_system_runs_every_model_it_can(cli, phase, system, model):
    code, out, err = cli("predict", phase, "--hardware", system, "--model", model, "--dies", 8, "--ep", 8,
                         "--redundant-experts", 0, "--format", "json")
    assert code == 0, err
    if not runnable(system, model):  # the file's dtype adapted to the chip's, and said so
        assert "cmperf: note:" in err and spec("hardware", system)["chip"] in err and "lacks" in err
    r = json.loads(out)
    assert r["dies"] == 8 and r["throughput_per_npu"] > 0 and math.isfinite(r["throughput_per_npu"])
    latency = r["tpot_ms"] if phase == "decode" else r["ttft_ms"]
    assert 0 < latency < 1e6
    assert "Traceback" not in err


@pytest.mark.parametrize("phase,system,model", [("decode", "atlas-800t-a2", "deepseek-v3"),
                                                ("prefill", "cloudmatrix384", "kimi-k2")])
def test_fp8_model_on_an_ascend_chip_runs_as_int8(cli, phase, system, model):
    """The 910B and 910C have no FP8 (INT8, BF16, FP16 only): an FP8 model file runs as INT8
    W8A8 (the CloudMatrix384 paper's choice), with a note naming the dtype, the chip and the
    field; the prediction is the one of the explicit --set; an FP8 the user sets is an error."""
    assert not runnable(system, model)
    code, out, err = cli("predict", phase, "--hardware", system, "--model", model, "--dies", 64, "--format", "json")
    assert code == 0, err
    note = [line for line in err.splitlines() if line.startswith("cmperf: note:")]
    assert len(note) == 1 and all(w in note[0] for w in ("fp8 -> int8", spec("hardware", system)["chip"], "matmul"))
    code, explicit, err2 = cli("predict", phase, "--hardware", system, "--model", model, "--dies", 64,
                               "--set", "model.precision.matmul=int8", "--format", "json")
    assert code == 0 and "cmperf: note:" not in err2
    lat = "tpot_ms" if phase == "decode" else "ttft_ms"
    assert json.loads(out)[lat] == json.loads(explicit)[lat]
    code, _, err = cli("predict", phase, "--hardware", system, "--model", model, "--dies", 64,
                       "--set", "model.precision.matmul=fp8")
    one_line_error(code, err, "fp8", spec("hardware", system)["chip"], "int8")


def test_a_hidden_dtype_the_chip_lacks_is_refused(cli):
    code, _, err = cli("predict", "decode", "--set", "model.precision.hidden=fp8")
    one_line_error(code, err, "fp8", "hidden")


def test_fp4_experts_can_be_set_on_blackwell(cli):
    code, out, err = cli("predict", "decode", "--hardware", "b200-cluster", "--model", "deepseek-v3", "--dies", 16,
                         "--redundant-experts", 0, "--shared-copies", 16, "--set", "model.precision.experts=fp4",
                         "--format", "json")
    assert code == 0, err


# --------------------------------------------------------------------------- broken spec files
@pytest.fixture
def broken(tmp_path):
    """Copies of the H800 cluster file edited line by line: its decode route names a tier it
    lacks ('infiniband'), its NVLink bandwidth is 0, its chip is a copy of the H800 without FP8."""
    import re

    sys_text = (REPO / "hardware" / "h800-cluster.yaml").read_text()
    chip_text = (REPO / "hardware" / "h800.yaml").read_text()
    chip_lines = [line for line in chip_text.splitlines() if not line.strip().startswith("fp8:")]
    assert len(chip_lines) == len(chip_text.splitlines()) - 1
    (tmp_path / "nofp8.yaml").write_text("\n".join(chip_lines).replace("name: h800", "name: nofp8") + "\n")

    def write(name, tier=False, zero=False, chip="h800"):
        text = sys_text.replace("\nchip: h800\n", f"\nchip: {chip}\n")
        if tier:
            head, decode = text.split("\n  decode:\n    route: direct\n", 1)
            assert decode.startswith("    tiers: [nvlink, ib]\n")
            text = head + "\n  decode:\n    route: direct\n" + decode.replace("[nvlink, ib]", "[nvlink, infiniband]", 1)
        if zero:
            text, n = re.subn(r"(\n  nvlink:\n(?:    .*\n)*?    bandwidth_Bps: \{value: )[^,]+", r"\g<1>0", text)
            assert n == 1
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def test_route_through_an_unknown_tier_is_named(cli, broken):
    code, _, err = cli("predict", "decode", "--hardware", broken("a.yaml", tier=True), "--dies", 16)
    one_line_error(code, err, "a.yaml", "infiniband", "expert_parallel.decode.tiers")


def test_a_tier_with_no_bandwidth_is_named(cli, broken):
    code, _, err = cli("predict", "decode", "--hardware", broken("b.yaml", zero=True), "--dies", 16)
    one_line_error(code, err, "b.yaml", "tiers.nvlink.bandwidth_Bps")


def test_a_chip_without_the_models_dtype_is_named(cli, broken):
    code, _, err = cli("predict", "decode", "--hardware", broken("c.yaml", chip="nofp8"), "--model", "deepseek-v3",
                       "--dies", 16, "--set", "model.precision.matmul=fp8")
    one_line_error(code, err, "nofp8", "fp8", "precision.matmul")
    code, _, err = cli("predict", "decode", "--hardware", broken("c.yaml", chip="nofp8"), "--model", "deepseek-v3",
                       "--dies", 16)  # the file's own dtype: adapted, with a note
    assert code == 0 and "nofp8" in err and "matmul fp8 -> int8" in err


def test_every_problem_is_named_at_once(cli, broken):
    """All three at once: one line, not the first problem alone."""
    path = broken("all.yaml", tier=True, zero=True, chip="nofp8")
    code, _, err = cli("predict", "decode", "--hardware", path, "--model", "deepseek-v3", "--dies", 16,
                       "--set", "model.precision.matmul=fp8")
    one_line_error(code, err, "infiniband", "tiers.nvlink.bandwidth_Bps", "nofp8", "fp8")


# --------------------------------------------------------------------------- (a) EP routes, by hand
def test_hierarchical_route_counts_one_copy_per_node_then_per_gpu():
    """DeepEP's normal kernels at EP16 over two 8-GPU NVLink domains, top-8, balanced, no shared
    expert: a token crosses InfiniBand once per other node it reaches and NVLink once per GPU it
    reaches that is not at its own (or its proxy's) position in the node."""
    from cmperf.cost.ops import MessageFormat, Route, ep_traffic

    T, k, ep, D, msg = 1000.0, 8, 16, 8, 7392.0
    route = Route(style="hierarchical", tiers=("nvlink", "ib"), inner_dies=D, message=MessageFormat(), chunked=True)
    sent = T * k * 15 / 16
    msgs, tiers = ep_traffic(route, T, k, 15 / 16, 0.0, sent, ep, msg)  # balanced: receives what it sends
    domains = ep / D  # 2 nodes
    outer_per_token = (domains - 1) * (1 - (1 - 1 / domains) ** k)  # 1 - 1/256 = 0.99609
    inner_per_token = ep * (1 - (1 - 1 / ep) ** k) * (D - 1) / D  # 16 x 0.40331 x 7/8 = 5.6459
    assert outer_per_token == pytest.approx(0.99609375) and inner_per_token == pytest.approx(5.64593, rel=1e-5)
    assert float(tiers["ib"]) == pytest.approx(T * outer_per_token * msg, rel=1e-12)
    assert float(tiers["nvlink"]) == pytest.approx(T * inner_per_token * msg, rel=1e-12)
    assert float(msgs) == pytest.approx(T * (outer_per_token + inner_per_token), rel=1e-12)
    # the same 16 GPUs sent directly: every one of the 7.5 remote copies per token travels,
    # 7/15 of them to the own node
    direct = Route(style="direct", tiers=("nvlink", "ib"), inner_dies=D, message=MessageFormat())
    _, dt = ep_traffic(direct, T, k, 15 / 16, 0.0, sent, ep, msg)
    assert float(dt["nvlink"]) == pytest.approx(sent * 7 / 15 * msg, rel=1e-12)
    assert float(dt["ib"]) == pytest.approx(sent * 8 / 15 * msg, rel=1e-12)
    assert float(tiers["ib"]) < float(dt["ib"]) / 4  # de-duplication per node saves most of the IB bytes
    # one node: nothing crosses InfiniBand
    _, one = ep_traffic(route, T, k, 7 / 8, 0.0, T * k * 7 / 8, 8, msg)
    assert float(one["ib"]) == 0.0


def test_chunked_transfers_cost_no_engine_messages(views_h800):
    """Packed per-destination buffers: the dispatch and combine of a chunked route put no
    messages through the engine, only bytes on the tiers, so the per-message cost cannot slow
    them; the same route with per-token messages can."""
    import dataclasses

    from cmperf.cost.collectives import route_of
    from cmperf.cost.ops import moe_ops, placement
    from cmperf.cost.roofline import op_time

    hw, m = views_h800
    route = route_of(hw, "prefill")
    assert route.style == "hierarchical" and route.chunked and route.inner_dies == 8
    pl = placement(m, 4096.0, 16, 0, 0, 1.0, 128)
    per_token = dataclasses.replace(route, chunked=False)
    for r, expect_msgs in ((route, False), (per_token, True)):
        _, dispatch, _, combine = moe_ops(m, 4096.0, 16, pl, r)
        for op in (dispatch, combine):
            assert (float(op.net_messages) > 0) == expect_msgs
            assert float(op.tier_bytes["ib"]) > 0 and float(op.tier_bytes["nvlink"]) > 0
    slow = {"system.collectives.message_issue_s": np.asarray([1e-6])}
    from cmperf.predict import load_specs

    hw_slow, _ = load_specs("h800-cluster", "deepseek-v3").views(slow)
    _, d_chunked, _, _ = moe_ops(m, 4096.0, 16, pl, route)
    _, d_token, _, _ = moe_ops(m, 4096.0, 16, pl, per_token)
    t = lambda op, h: float(np.asarray(op_time(op, h).time_s).ravel()[0])  # noqa: E731
    assert t(d_chunked, hw_slow) == pytest.approx(t(d_chunked, hw), rel=1e-12)
    assert t(d_token, hw_slow) > 2 * t(d_token, hw)


def test_deepep_normal_dispatch_at_ep16_by_hand(specs_h800):
    """DeepEP's internode normal dispatch, 4,096 FP8 tokens per GPU over 16 H800 (2 nodes): the
    IB bytes (one copy per remote node) over the IB bandwidth, the NVLink forwards over NVLink,
    whichever is longer, + one launch + ceil(log2 16) = 4 barrier rounds of 2 IB latencies.
    DeepEP README (V1c): 43 GB/s RDMA bottleneck bandwidth at EP16."""
    from cmperf.predict import predict

    sysf, chip = spec("hardware", "h800-cluster"), spec("hardware", "h800")
    ib, nv = num(sysf["tiers"]["ib"]["bandwidth_Bps"]), num(sysf["tiers"]["nvlink"]["bandwidth_Bps"])
    T, msg = 4096, 7168 + 7168 / 128 * 4  # FP8 hidden + one FP32 scale per 128 (DeepEP's test)
    ib_bytes = T * (1 - 0.5 ** 8) * msg
    nv_bytes = T * 16 * (1 - (15 / 16) ** 8) * 7 / 8 * msg
    quantise = T * 3 * 7168 / num(chip["die"]["vector_ops_per_s"])
    latency = num(chip["latency"]["kernel_launch_s"]) + 4 * 2 * num(sysf["tiers"]["ib"]["latency_s"])
    expect = max(ib_bytes / ib, nv_bytes / nv, quantise) + latency
    # HBM: read the BF16 hidden states, write the 7.5 remote copies per token, receive as many
    hbm = (T * 7168 * 2 + 2 * T * 8 * 15 / 16 * msg) / (num(chip["die"]["hbm_bandwidth_Bps"])
                                                         * num(chip["efficiency"]["memory_bandwidth"]))
    assert hbm < ib_bytes / ib  # the IB port, not HBM, is the bottleneck
    t = predict("collective", {"tokens": T, "ep": 16}, specs_h800).table
    assert t["dispatch_normal_us"].iat[0] == pytest.approx(expect * 1e6, rel=1e-9)
    # bottleneck bandwidth: one copy per distinct node, the own one included
    bottleneck = T * 2 * (1 - 0.5 ** 8) * msg / expect / 1e9
    assert t["dispatch_normal_bottleneck_GBps"].iat[0] == pytest.approx(bottleneck, rel=1e-9)
    assert bottleneck == pytest.approx(43, rel=0.15)


@pytest.mark.parametrize("system,model,ep,shared", [("h800-cluster", "deepseek-v3", 16, 32),
                                                    ("cloudmatrix384", "deepseek-r1", 32, 32)])
def test_local_shared_experts_add_no_traffic(system, model, ep, shared):
    """With a shared copy on every die and balanced routing, a die receives exactly the routed
    copies it sends: dispatch and combine carry T k (ep-1)/ep copies (direct route) or T x
    distinct remote nodes (hierarchical), as if there were no shared expert."""
    from cmperf.cost.collectives import route_of
    from cmperf.cost.ops import dispatch_message_B, moe_ops, placement
    from cmperf.predict import load_specs

    hw, m = load_specs(system, model).views()
    T = 4096.0
    route = route_of(hw, "prefill")
    pl = placement(m, T, ep, 32, shared, 1.0, 128)
    assert not bool(pl.shared_remote)  # every die holds a copy: shared tokens stay local
    _, dispatch, _, combine = moe_ops(m, T, ep, pl, route)
    msg = dispatch_message_B(m, route.message)
    if route.style == "hierarchical":
        domains = ep / route.inner_dies
        assert float(dispatch.tier_bytes["ib"]) == pytest.approx(T * (domains - 1) * (1 - (1 - 1 / domains) ** 8) * msg)
    else:
        assert float(combine.net_messages) == pytest.approx(T * 8 * (ep - 1) / ep)


def test_hybridep_on_few_sms_is_sm_bound_by_hand():
    """HybridEP's dispatch and combine inside the NVL72 domain (the GB200 reference file's
    route): on ``comm_sms`` SMs a kernel cannot beat tokens x EP x sm_pair_s / comm_sms, the
    SMs' own work per (token, rank) pair. At 36 ranks: 16 and 8 SMs are SM-bound, by hand
    (+ one launch + ceil(log2 36) = 6 barrier rounds of 2 latencies of the route's outer tier,
    InfiniBand, as for every route); the bottleneck
    bandwidth rises with the SMs and saturates at the link rate (= no SM limit); dispatch and
    combine pay the same SM time. HybridEP's table: 260.53 GB/s FP8 dispatch at 16 SMs,
    489.27 at 32 (within the reference file's 15 %)."""
    from cmperf.calibration.reference import REFERENCE_DIR, load_reference
    from cmperf.predict import load_specs, predict

    ref = load_reference(REFERENCE_DIR / "gb200-nvl72-microbenchmarks.yaml")
    specs = load_specs("gb200-nvl72", "deepseek-v3", ref.sets)
    sysf, chip = spec("hardware", "gb200-nvl72"), spec("hardware", "gb200")
    c = num(sysf["expert_parallel"]["prefill"]["sm_pair_s"])
    T, ep = 4096, 36
    latency = num(chip["latency"]["kernel_launch_s"]) + 6 * 2 * num(sysf["tiers"]["ib"]["latency_s"])
    sms = [0, 8, 16, 32, 64, 148]
    t = predict("collective", {"tokens": T, "ep": ep, "redundant_experts": 32, "comm_sms": sms}, specs).table
    d, c_us = t["dispatch_normal_us"].to_numpy(), t["combine_normal_us"].to_numpy()
    for i, n in ((1, 8), (2, 16)):
        assert d[i] == pytest.approx((T * ep * c / n + latency) * 1e6, rel=1e-9)
        assert c_us[i] == pytest.approx(d[i], rel=1e-9)  # the same SM work per pair
    bw = t["dispatch_normal_bottleneck_GBps"].to_numpy()
    assert np.all(np.diff(bw[1:]) >= 0)  # more SMs never slower
    assert bw[-1] == pytest.approx(bw[0], rel=1e-12)  # 148 SMs: the link sets the pace, as with no limit
    assert bw[2] == pytest.approx(260.53, rel=0.15) and bw[3] == pytest.approx(489.27, rel=0.15)


def test_sm_count_is_inert_without_an_sm_cost(specs_h800):
    """A route without ``sm_pair_s`` (DeepEP on the H800) is not SM-limited: any comm_sms
    gives the same time."""
    from cmperf.predict import predict

    t = predict("collective", {"tokens": 4096, "ep": 16, "comm_sms": [0, 1, 20]}, specs_h800).table
    assert np.ptp(t["dispatch_normal_us"].to_numpy()) == 0 and np.ptp(t["combine_us"].to_numpy()) == 0


def test_a_negative_sm_count_is_one_line(cli, tmp_path):
    """A collective row with comm_sms below 0: one line naming the field, exit 2."""
    row = {"id": "X", "kind": "evidence", "where": "test", "phase": "collective", "metric": "dispatch_normal_us",
           "paper": 100.0, "tolerance": 0.15, "description": "a negative SM count",
           "scenario": {"tokens": 4096, "ep": 8, "comm_sms": -4}}
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump({"name": "bad", "source": "test", "hardware": "gb200-nvl72", "model": "deepseek-v3",
                                 "rows": [row]}))
    code, _, err = cli("validate", f)
    one_line_error(code, err, "comm_sms", "-4")


# --------------------------------------------------------------------------- (b) GEMM kernel, by hand
@pytest.fixture(scope="module")
def specs_h800():
    from cmperf.predict import load_specs

    return load_specs("h800-cluster", "deepseek-v3")


@pytest.fixture(scope="module")
def views_h800(specs_h800):
    return specs_h800.views()


def _gemm_us(views, mm, n, k, groups=1, dtype="fp8"):
    from cmperf.schedule.kernels import gemm

    hw, m = views
    g = {"m": np.array([mm]), "n": np.array([n]), "k": np.array([k]), "groups": np.array([groups]),
         "dtype": np.array([dtype]), "layout": np.array(["contiguous"])}
    return float(gemm(hw, m, g)["gemm_us"][0])


def _tiles(mm, n, groups=1, units=132, masked=False, tile_cols=None):
    from cmperf.cost.roofline import Gemm, tiling

    t = tiling(Gemm(m=mm, n=n, k=1, groups=groups, masked=masked), units, 128, tile_cols)
    return tuple(float(x) for x in (t.block_m, t.block_n, t.tiles, t.waves, t.multicast))


def test_gemm_tiles_and_waves_by_hand():
    """DeepGEMM's block choice (fewest waves, then the fullest last wave, then the larger
    block N) on 132 SMs, counted by hand; Ascend's fixed 128 x 152 tile on 24 cube cores."""
    # M 64 x N 7168: block 64 x 56 -> 128 tiles, one wave (64 x 112 would leave 68 SMs idle)
    assert _tiles(64, 7168) == (64, 56, 128, 1, 1)
    # N 2112: block N 16 fills the 132 SMs exactly, for M 64 and M 128
    assert _tiles(64, 2112) == (64, 16, 132, 1, 1)
    assert _tiles(128, 2112) == (128, 16, 132, 1, 1)
    # M 4096 x N 7168: only block N 128 reaches 14 waves (32 x 56 = 1,792 tiles); A multicast
    assert _tiles(4096, 7168) == (128, 128, 1792, 14, 2)
    # masked 4 groups x 256 rows, N 4096: 8 x 32 = 256 tiles, two waves, no multicast
    assert _tiles(256, 4096, groups=4, masked=True) == (128, 128, 256, 2, 1)
    # Table 10 on a 910C die: 4 x 56 x 27 = 6,048 tiles of 128 x 152 = 252 waves of 24
    assert _tiles(7168, 4096, groups=4, units=24, tile_cols=152) == (128, 152, 6048, 252, 1)


def test_small_m_gemm_time_by_hand(views_h800):
    """M 64, N 7168, K 16384 in FP8 on one H800, tile by tile: 128 tiles of 64 x 56, one
    wave; compute = 2 x 64 x 56 x (K + K0) per SM at peak x efficiency / 132; each SM
    streams its A and B panels (64 + 56) x K bytes and writes 64 x 56 BF16; HBM moves the
    unique bytes; the three combine as a p-norm, plus one launch. DeepGEMM README: 336 TFLOPS."""
    chip = spec("hardware", "h800")
    d, eff = chip["die"], chip["efficiency"]
    hbm = num(d["hbm_bandwidth_Bps"]) * num(eff["memory_bandwidth"])
    launch = num(chip["latency"]["kernel_launch_s"])
    k0, p = num(eff["matmul_k_overhead"]), num(eff["matmul_overlap_exponent"])
    M, N, K = 64, 7168, 16384
    compute = 2 * 64 * 56 * (K + k0) / (num(d["peak_flops_per_s"]["fp8"]) * num(eff["matmul_compute"]) / 132)
    stream = ((64 + 56) * K + 64 * 56 * 2) / num(eff["matmul_stream_Bps"])
    memory = (M * K + K * N + M * N * 2) / hbm  # 39 us: weight streaming dominates
    assert memory > 2 * max(compute, stream)
    t = _gemm_us(views_h800, M, N, K)
    assert t == pytest.approx(((compute ** p + memory ** p + stream ** p) ** (1 / p) + launch) * 1e6, rel=1e-9)
    assert 2 * M * N * K / (t * 1e-6) / 1e12 == pytest.approx(336, rel=0.15)


def test_gemm_never_beats_the_roofline(views_h800):
    """Tiles only add work (padding, idle units in the last wave, operand re-reads): no shape
    runs faster than its FLOPs at the tile efficiency or its unique bytes at the HBM rate."""
    chip = spec("hardware", "h800")
    d, eff = chip["die"], chip["efficiency"]
    hbm = num(d["hbm_bandwidth_Bps"]) * num(eff["memory_bandwidth"])
    rate = num(d["peak_flops_per_s"]["fp8"]) * num(eff["matmul_compute"])
    launch = num(chip["latency"]["kernel_launch_s"])
    for M, N, K, G in [(64, 2112, 7168, 1), (100, 5000, 3000, 1), (256, 4096, 7168, 4), (4096, 7168, 2048, 8),
                       (1, 129, 7168, 1), (8192, 24576, 1536, 1)]:
        t = _gemm_us(views_h800, M, N, K, groups=G) * 1e-6
        assert t >= 2 * G * M * N * K / rate + launch
        assert t >= G * (M * K + K * N + 2 * M * N) / hbm + launch


def test_gemm_time_is_a_step_function_of_n():
    """With a fixed tile (a 910C die: 128 x 152, 24 cube cores, paper Table 10) a
    compute-bound GEMM takes the same time for every N of the same tile count (ceil(N / 152)
    = 48 from N 7,145 to 7,296) and jumps at the next tile (more waves)."""
    from cmperf.predict import load_specs
    from cmperf.schedule.kernels import gemm

    hw, m = load_specs("cloudmatrix384", "deepseek-r1").views()
    n = np.array([7145.0, 7200.0, 7296.0, 7297.0])
    g = {"m": np.full(4, 2048.0), "n": n, "k": np.full(4, 4096.0), "groups": np.full(4, 4.0),
         "dtype": np.array(["int8"] * 4), "layout": np.array(["contiguous"] * 4)}
    t = gemm(hw, m, g)["gemm_us"]
    assert t[0] == t[1] == t[2]
    # 4 x 16 x 49 = 3,136 tiles -> 131 waves instead of 128
    assert t[3] > t[2] * 1.02


def test_gb200_fp4_gemm_runs_at_its_own_efficiency():
    """NVFP4 GEMMs use their own efficiency and fixed cost (matmul_by_dtype.fp4), FP8 ones
    matmul_compute: 16384^3 in each, by hand (148 SMs, block 128 x 128: 128 x 128 tiles in
    ceil(16,384 / 148) = 111 waves)."""
    from cmperf.predict import load_specs
    from cmperf.schedule.kernels import gemm

    chip = spec("hardware", "gb200")
    d, eff, lat = chip["die"], chip["efficiency"], chip["latency"]
    launch = num(lat["kernel_launch_s"])
    hw, m = load_specs("gb200-nvl72", "deepseek-v3").views()
    g = {c: np.full(2, 16384.0) for c in ("m", "n", "k")} | {"groups": np.ones(2), "dtype": np.array(["fp8", "fp4"]),
                                                          "layout": np.array(["contiguous"] * 2)}
    t = gemm(hw, m, g)["gemm_us"] * 1e-6
    work = 111 * 2 * 128 * 128 * 16384 * 148
    fp4 = eff["matmul_by_dtype"]["fp4"]
    assert t[0] == pytest.approx(work / (num(d["peak_flops_per_s"]["fp8"]) * num(eff["matmul_compute"])) + launch, rel=1e-9)
    assert t[1] == pytest.approx(work / (num(d["peak_flops_per_s"]["fp4"]) * num(fp4["compute"]))
                                 + launch + num(fp4["kernel_fixed_s"]), rel=1e-9)


# --------------------------------------------------------------------------- (c, d) GQA, MLA, TP, by hand
LLAMA_KV_B = 80 * 2 * 8 * 128 * 2  # layers x (K and V) x KV heads x head dim x BF16 = 327,680 B per token
DSV3_KV_B = 61 * (512 + 64) * 2  # MLA: layers x (latent + RoPE key) x BF16 = 70,272 B per token


def _decode(cli, system, model, *extra):
    code, out, err = cli("predict", "decode", "--hardware", system, "--model", model, "--batch", 8,
                         "--prompt-len", 1000, "--output-len", 24, *extra, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def _kv(system, model, rows):
    """kv_cache_per_die_bytes of decode at 8 requests per NPU and 1,024 tokens of context (the
    KV a request holds is the mean context it attends, kv_len; docs/model.md §7)."""
    from cmperf.predict import load_specs, predict

    base = {"batch": 8, "prompt_len": 1000, "output_len": 24, "kv_len": 1024}
    t = predict("decode", rows=[{**base, **r} for r in rows], specs=load_specs(system, model)).table
    return t["kv_cache_per_die_bytes"].to_list()


def test_gqa_cache_is_key_and_value_per_kv_head():
    """Llama-3.1-70B (models/llama-3.1-70b.yaml: 80 layers, 8 KV heads of 128, BF16): 327,680 B
    per token, 8 requests x 1,024 tokens on one H100; on CloudMatrix384 a die holds half an
    NPU's 8 requests. DeepSeek-V3's MLA latent is 4.7x smaller per token."""
    m = spec("models", "llama-3.1-70b")
    a = m["attention"]
    assert LLAMA_KV_B == m["num_layers"] * 2 * a["num_kv_heads"] * a["head_dim"] * 2
    [h100] = _kv("h100-cluster", "llama-3.1-70b", [{"dies": 8}])
    assert h100 == pytest.approx(8 * 1024 * LLAMA_KV_B, rel=1e-12)
    [cm] = _kv("cloudmatrix384", "llama-3.1-70b", [{"dies": 8}])
    assert cm == pytest.approx(4 * 1024 * LLAMA_KV_B, rel=1e-12)
    [mla] = _kv("h800-cluster", "deepseek-v3", [{"dies": 16, "mtp": 0}])
    assert mla == pytest.approx(8 * 1024 * DSV3_KV_B, rel=1e-12)
    assert h100 / mla == pytest.approx(327680 / 70272)


def test_tensor_parallelism_splits_kv_heads_but_not_the_mla_latent():
    """A TP group of t dies serves t times the requests of one die. GQA: each die keeps 1/t of
    the 8 KV heads, so its cache stays the same up to t = 8 and doubles at t = 16 (each head on
    two dies). MLA: the one latent per token cannot be split, so every die keeps it whole."""
    base = 8 * 1024 * LLAMA_KV_B
    gqa = _kv("h100-cluster", "llama-3.1-70b", [{"dies": 16, "tp": tp} for tp in (1, 2, 8, 16)])
    assert gqa == pytest.approx([base, base, base, 2 * base], rel=1e-12)
    mla = _kv("h800-cluster", "deepseek-v3", [{"dies": 16, "mtp": 0, "tp": tp} for tp in (1, 4)])
    assert mla == pytest.approx([8 * 1024 * DSV3_KV_B, 4 * 8 * 1024 * DSV3_KV_B], rel=1e-12)


def test_tp8_holds_an_eighth_of_the_layer_weights(cli):
    """Llama-3.1-70B in BF16: per layer q, o 8192 x 8192, k, v 8192 x 1024, SwiGLU 3 x 8192 x
    28672, two 8192 norms, on every die; embedding and head 128256 x 8192 each, vocab-parallel
    in decode as the cost model runs them (VocabParallelEmbedding, ParallelLMHead). TP8 splits
    the layers' matrices, the embedding and the head eight ways: 17.64 GB per die (21.3 GB
    when the embedding and head were counted whole on every die)."""
    h, L, V = 8192, 80, 128256
    matrices = 2 * h * h + 2 * h * 1024 + 3 * h * 28672
    norms, vocab = L * 2 * h, 2 * V * h  # norms on every die; embedding + head split over TP
    tp1 = _decode(cli, "h100-cluster", "llama-3.1-70b", "--dies", 8, "--tp", 1)["weights_per_die_bytes"]
    tp8 = _decode(cli, "h100-cluster", "llama-3.1-70b", "--dies", 8, "--tp", 8)["weights_per_die_bytes"]
    assert tp1 == pytest.approx(2 * (L * matrices + norms + vocab), rel=1e-6)  # 141.1 GB: does not fit an 80 GB H100
    assert tp8 == pytest.approx(2 * (L * matrices / 8 + norms + vocab / 8), rel=1e-6)  # 17.64 GB
    assert tp8 == pytest.approx(17.6407e9, rel=1e-5)
    assert 1 / 8 < tp8 / tp1 < 1 / 8 + 2 * norms / (L * matrices)


def test_a_dense_model_has_no_expert_parallel_ops(cli):
    """Llama-3.1-70B has no MoE: no gate, dispatch, experts or combine, and no dispatch/combine
    buffers; an MoE model (Qwen3-30B-A3B) on the same system has all four."""
    dense = _decode(cli, "h100-cluster", "llama-3.1-70b", "--dies", 8, "--tp", 8, "--breakdown")
    ops = {o["op"] for o in dense["breakdown"]}
    assert {"dense_ffn", "attention_core"} <= ops
    assert not ops & {"gate", "dispatch", "experts", "combine"}
    assert dense["buffers_per_die_bytes"] == 0
    moe = _decode(cli, "h100-cluster", "qwen3-30b-a3b", "--dies", 8, "--redundant-experts", 0, "--breakdown")
    assert {"gate", "dispatch", "experts", "combine"} <= {o["op"] for o in moe["breakdown"]}
    assert moe["buffers_per_die_bytes"] > 0


# --------------------------------------------------------------------------- known misses
def _reference(tmp_path, name, known_miss=None, passing_known_miss=None):
    """Two DeepGEMM rows of the H800 reference file: one the roofline reaches, one it cannot
    (M 64 N 7168 K 2048: 295 TFLOPS published, 1.4x the same-bytes N 2112 row). The HBM
    efficiency and launch are pinned, so a re-fit cannot move the miss into tolerance."""
    src = yaml.load((REPO / "cmperf" / "reference" / "h800-microbenchmarks.yaml").read_text(), Loader=LOADER)
    rows = {r["id"]: dict(r) for r in src["rows"]}
    good, miss = rows["DG-4096x4096x7168"], rows["DG-64x7168x2048"]
    for r in (good, miss):
        r.pop("known_miss", None)
    if known_miss is not None:
        miss["known_miss"] = known_miss
    if passing_known_miss is not None:
        good["known_miss"] = passing_known_miss
    ref = {"name": "h800-two-gemms", "source": src["source"], "hardware": "h800-cluster", "model": "deepseek-v3",
           "sets": ["chip.efficiency.memory_bandwidth=0.9", "chip.latency.kernel_launch_s=3e-6",
                    "chip.efficiency.matmul_compute=0.75", "chip.efficiency.matmul_k_overhead=350"],
           "rows": [good, miss]}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(ref, sort_keys=False))
    return path


REASON = "tile-level parallelism: a per-die roofline does not see DeepGEMM's block choice for N 7168"


def test_a_failing_row_fails_validate(cli, tmp_path):
    code, out, err = cli("validate", _reference(tmp_path, "fail.yaml"))
    assert code == 1, err
    assert "FAIL" in out and "DG-64x7168x2048" in out


def test_a_known_miss_does_not_fail_validate(cli, tmp_path):
    code, out, err = cli("validate", _reference(tmp_path, "miss.yaml", known_miss=REASON))
    assert code == 0, err
    assert "known miss" in out and REASON in out and "FAIL" not in out


def test_a_known_miss_back_within_tolerance_is_flagged(cli, tmp_path):
    code, out, err = cli("validate", _reference(tmp_path, "back.yaml", known_miss=REASON,
                                                passing_known_miss="a reason that no longer holds for this row"))
    assert code == 0, err
    assert "drop known_miss" in out


def test_a_short_known_miss_is_refused(cli, tmp_path):
    code, _, err = cli("validate", _reference(tmp_path, "short.yaml", known_miss="wave quantisation"))
    one_line_error(code, err, "short.yaml", "known_miss", "20")
