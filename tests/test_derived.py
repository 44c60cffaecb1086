"""Every DERIVED number of the stack profiles and of the serving evidence is recomputed here
from the numbers its source states (HELPERS.md: no hand arithmetic in a YAML comment).

A stack field whose source says DERIVED, or states arithmetic (``=``, ``/``, ``midpoint``),
must have an entry in ``RECOMPUTE``: a new hand-computed value fails until its arithmetic is
written down here, as code."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cmperf.schedule.decode import acceptance_for, emitted_tokens

REPO = Path(__file__).resolve().parents[1]
STACKS = {p.stem: yaml.safe_load(p.read_text()) for p in sorted((REPO / "stacks").glob("*.yaml"))}

# (stack, field) -> the value recomputed from the inputs its source quotes
RECOMPUTE = {
    # SGLASC (serving-reference §2.5): accept length 2.84 at 3 NEXTN steps
    ("sglang-ascend", "mtp_acceptance"): lambda: acceptance_for(2.84, 3),
    # paper §4.2.1: at most 96 tokens per die, each request 1 + 1 MTP draft token
    ("cloudmatrix-infer", "max_running_per_rank"): lambda: 96 // (1 + 1),
    # paper Table 3: 16K tokens per NPU; an attention group of TP 4 dies = 4 / 2 NPUs
    ("cloudmatrix-infer", "max_prefill_tokens"): lambda: 16384 * 4 // 2,
    # XDS (serving-reference §2.5): 70-90 % acceptance, the midpoint
    ("xdeepserve", "mtp_acceptance"): lambda: (0.70 + 0.90) / 2,
    # TensorRT-LLM blog1 (serving-reference §2.5): accept length 2.82 at MTP depth 3
    ("trtllm-dynamo", "mtp_acceptance"): lambda: acceptance_for(2.82, 3),
    # DYN-GB200 (hardware-reference §7.3): decode --max-running-requests 36864 over --dp-size 48
    ("trtllm-dynamo", "max_running_per_rank"): lambda: 36864 / 48,
    # SGLMTP: draft_token_num 2 counts the verified token: 1 draft
    ("sglang", "mtp_draft_tokens"): lambda: 2 - 1,
    # CloudMatrix384 paper §4.2.4: a graph launch takes 0.6-0.8 ms, the midpoint
    **{(name, "graph_launch_s"): (lambda: (0.6e-3 + 0.8e-3) / 2)
       for name in ("cloudmatrix-infer", "sglang-ascend", "vllm-ascend", "xdeepserve")},
}
ARITHMETIC = ("DERIVED", " = ", "midpoint")


def test_the_accept_length_solver_inverts_the_geometric_accept_length():
    for k in (1, 2, 3, 5):
        for a in (0.0, 0.3, 0.7, 0.7747, 0.95, 1.0):
            L = float(emitted_tokens({"mtp": 1, "mtp_k": k, "mtp_acceptance": a}))
            assert acceptance_for(L, k) == pytest.approx(a, abs=1e-9)
    assert acceptance_for(1.7, 1) == pytest.approx(0.7)  # the paper's 70 % -> 1.7 tokens per step
    # the example: 0.73 gives 2.65 tokens at 3 drafts, 0.775 gives 2.84
    assert float(emitted_tokens({"mtp": 1, "mtp_k": 3, "mtp_acceptance": 0.73})) == pytest.approx(2.65, abs=0.01)
    assert acceptance_for(2.84, 3) == pytest.approx(0.775, abs=0.001)
    with pytest.raises(ValueError):
        acceptance_for(4.5, 3)


def test_every_derived_stack_value_is_what_its_stated_inputs_give():
    for (name, field), recompute in RECOMPUTE.items():
        stated = STACKS[name][field]["value"]
        assert stated == pytest.approx(recompute(), rel=5e-4), (name, field, stated, recompute())


def test_no_stack_value_carries_arithmetic_the_test_does_not_recompute():
    missing = [(name, field) for name, raw in STACKS.items() for field, v in raw.items()
               if isinstance(v, dict) and any(w in v.get("source", "") for w in ARITHMETIC)
               and not v["source"].startswith("fitted") and (name, field) not in RECOMPUTE]
    assert not missing, f"stack values with hand arithmetic in their source, not recomputed here: {missing}"


# serving-reference §1.2 (SGLASC): --max-running-requests and the DP size of each run's
# instances; SGLang divides the limit by dp_size per DP worker (§2.6, tp_worker.py)
RUN_FLAGS = {
    "HT-3.5K/1.5K": {"decode": (832, 32), "prefill": (8, 2)},
    "LL-6K/1.6K": {"decode": (32, 16), "prefill": (4, 2)},
    "LL-3.9K/1K": {"decode": (32, 16), "prefill": (4, 2)},
    "LL-3.5K/1.5K": {"decode": (32, 16), "prefill": (4, 2)},
    "LL-3.5K/1K": {"decode": (32, 16), "prefill": (4, 2)},
    "MIXED-2K/2K-W4A8": {"decode": (256, 16)},
}
# serving-reference §1.3: each run's logged accept length (the HT log prints none)
ACCEPT = {"LL-6K/1.6K": 2.59, "LL-3.9K/1K": 2.88, "LL-3.5K/1.5K": 2.84, "LL-3.5K/1K": 2.84, "MIXED-2K/2K-W4A8": 2.82}


def _serving_rows():
    raw = yaml.safe_load((REPO / "cmperf" / "reference" / "sglang-a3-serving.yaml").read_text())
    return {r["id"]: r for r in raw["rows"]}


def test_the_serving_runs_per_rank_limits_are_the_logged_flags_over_the_dp_size():
    rows = _serving_rows()
    assert set(rows) == set(RUN_FLAGS)
    for rid, flags in RUN_FLAGS.items():
        sets = dict(s.split("=") for s in rows[rid].get("stack_sets", []))
        total, dp = flags["decode"]
        assert int(sets["max_running_per_rank"]) == total // dp, rid
        if "prefill" in flags:
            total, dp = flags["prefill"]
            assert int(sets["max_prefill_requests"]) == total // dp, rid


def test_the_serving_runs_accept_lengths_are_the_logged_ones():
    rows = _serving_rows()
    for rid, L in ACCEPT.items():
        assert rows[rid].get("accept_length") == L, rid
    assert "accept_length" not in rows["HT-3.5K/1.5K"]  # not printed in the HT log (MISSING)
