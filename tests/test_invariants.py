"""Physical invariants: more HBM, UB or compute never slows a prediction; a longer
context never speeds decode. Hypothesis draws scenarios; each check is one vectorised grid."""

import numpy as np

from hypothesis import assume, given, settings, strategies as st

from cmperf.predict import predict

RESOURCES = ["chip.die.hbm_bandwidth_Bps", "system.tiers.ub.bandwidth_Bps", "chip.die.peak_flops_per_s.int8",
             "chip.die.peak_flops_per_s.bf16", "chip.die.vector_ops_per_s", "chip.die.hbm_capacity_B"]

decode_scenarios = st.fixed_dictionaries({
    "batch": st.integers(1, 256),
    "kv_len": st.integers(256, 32768),
    "mtp": st.sampled_from([0, 1]),
    "microbatches": st.sampled_from([0, 1, 2]),
    "ep": st.sampled_from([32, 64, 160, 320]),
    "mtp_acceptance": st.floats(0, 1),
    "expert_imbalance": st.floats(1, 2),
})
prefill_scenarios = st.fixed_dictionaries({
    "tokens_per_npu": st.integers(1024, 32768),
    "prompt_len": st.sampled_from([1024, 2048, 4096, 8192]),
    "microbatches": st.sampled_from([0, 1, 2]),
    "attn_tp": st.sampled_from([1, 2, 4, 8]),
    "expert_imbalance": st.floats(1, 2),
})


def _base(specs, path):
    from cmperf.calibration.validate import spec_value
    return spec_value(specs, path)


@settings(max_examples=25, deadline=None)
@given(decode_scenarios, st.sampled_from(RESOURCES), st.floats(1.0, 4.0))
def test_more_resource_never_slows_decode(specs, scenario, resource, factor):
    v = _base(specs, resource)
    t = predict("decode", scenario, specs, sweeps={resource: [v, v * factor]}).table
    assert t["tpot_ms"].iat[1] <= t["tpot_ms"].iat[0] * (1 + 1e-12)


@settings(max_examples=25, deadline=None)
@given(prefill_scenarios, st.sampled_from(RESOURCES), st.floats(1.0, 4.0))
def test_more_resource_never_slows_prefill(specs, scenario, resource, factor):
    # a prompt's tokens split over its attention TP group at most (2 dies per 910C)
    assume(scenario["tokens_per_npu"] / 2 * scenario["attn_tp"] >= scenario["prompt_len"])
    v = _base(specs, resource)
    t = predict("prefill", scenario, specs, sweeps={resource: [v, v * factor]}).table
    assert t["throughput_per_npu"].iat[1] >= t["throughput_per_npu"].iat[0] * (1 - 1e-12)
    assert t["ttft_ms"].iat[1] <= t["ttft_ms"].iat[0] * (1 + 1e-12)


@settings(max_examples=25, deadline=None)
@given(decode_scenarios)
def test_longer_context_never_speeds_decode(specs, scenario):
    scenario = {**scenario, "kv_len": [scenario["kv_len"], scenario["kv_len"] * 2, scenario["kv_len"] * 4]}
    t = predict("decode", scenario, specs).table
    for col in ("tpot_ms", "layer_us"):
        x = t[col].to_numpy()
        assert np.all(np.diff(x) >= -1e-12 * x[:-1])


def test_longer_prompt_never_speeds_prefill_per_token(specs):
    t = predict("prefill", {"prompt_len": [1024, 2048, 4096, 8192, 16384], "tokens_per_npu": 16384}, specs).table
    assert np.all(np.diff(t["throughput_per_npu"].to_numpy()) <= 0)


def test_more_memory_fits_more(specs):
    v = _base(specs, "chip.die.hbm_capacity_B")
    t = predict("decode", {}, specs, sweeps={"chip.die.hbm_capacity_B": [v, 2 * v]}).table
    assert t["max_batch_per_npu"].iat[1] > t["max_batch_per_npu"].iat[0]


def test_more_batch_more_throughput_until_saturation(specs):
    t = predict("decode", {"batch": [1, 2, 4, 8, 16, 32, 64]}, specs).table
    assert np.all(np.diff(t["throughput_per_npu"].to_numpy()) > 0)
    assert np.all(np.diff(t["tpot_ms"].to_numpy()) >= 0)


def test_perfect_balance_is_best(specs):
    t = predict("prefill", {"expert_imbalance": [1.0, 1.2, 1.5, 2.0]}, specs).table
    assert np.all(np.diff(t["throughput_per_npu"].to_numpy()) < 0)
