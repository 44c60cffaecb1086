"""Physical invariants of the inputs: a longer context never speeds decode, more memory fits
more, a larger batch gains throughput. Hypothesis draws scenarios; each check is one vectorised
grid. (More of a spec's resources never slowing a prediction: tests/test_monotonicity.py.)"""

import numpy as np

from hypothesis import given, settings, strategies as st

from cmperf.predict import predict

decode_scenarios = st.fixed_dictionaries({
    "batch": st.integers(1, 256),
    "kv_len": st.integers(256, 32768),
    "mtp": st.sampled_from([0, 1]),
    "microbatches": st.sampled_from([0, 1, 2]),
    "ep": st.sampled_from([32, 64, 160, 320]),
    "mtp_acceptance": st.floats(0, 1),
    "expert_imbalance": st.floats(1, 2),
})


def _base(specs, path):
    from cmperf.calibration.validate import spec_value
    return spec_value(specs, path)


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
