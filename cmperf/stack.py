"""The serving stack a prediction runs under (``--stack``, stacks/*.yaml, docs/model.md §11).

A stack profile states facts of the software that serves the model — whether a phase runs as
graphs or eagerly, the host time per step it cannot hide, two-batch overlap, MTP draft tokens
and their acceptance, batching limits, KV pages, how it balances DP ranks and experts — each
with its source. It enters the one cost model in three ways, and nowhere as a factor:

    host time      each phase's schedule adds the stack's host and seam time of a step
                   (cmperf/cost/host.py: step = max(device, launches) + serial host time;
                   the profile rides along as ``hw.stack``, docs/model.md §11.1)
    inputs         mtp_k = mtp_draft_tokens, mtp_acceptance, microbatches = auto (two-batch
                   overlap) or 1, where the user gives none
    kernels        fusion groups: adjacent kernels run as one (cmperf/cost/fusion.py); absent:
                   every kernel of cmperf/specs/kernels.py launched on its own
    limits         max_running_per_rank, max_prefill_tokens / requests, chunked prefill, KV
                   pages, DP balance, EPLB: the request-level simulation and the planner
                   (cmperf/simulate, cmperf/plan) enforce them; a single prediction does not

The default is the system's (``deployment.stack``: cloudmatrix-infer on CloudMatrix384, SGLang
on SGLang's H100 and GB200 runs; none where no stack is known); ``--stack none`` gives the bare
cost model.
"""

from __future__ import annotations

from typing import Any, Mapping

NONE = "none"
PHASES = ("decode", "afd", "prefill")  # the phases a stack serves


def load_stack(name: str, overrides: Mapping[str, Any] | None = None) -> dict:
    """A stack profile as plain data (validated like every spec file; from the spec cache
    when unchanged and not overridden)."""
    from .specs.loader import cached_spec, load

    if not overrides:
        hit = cached_spec("stack", name)
        if hit is not None:
            return hit[0]
    spec, _ = load("stack", name, overrides, "stack")
    return spec.model_dump(mode="json")


def stack_fusion(stack) -> tuple:
    """The stack's fused kernel groups (plain data or a validated profile; none: ())."""
    if stack is None:
        return ()
    f = stack.get("fusion") if isinstance(stack, dict) else getattr(stack, "fusion", None)
    if f is None:
        return ()
    groups = f["value"] if isinstance(f, dict) else f.value
    return tuple(tuple(g) for g in groups)


def input_defaults(phase: str, stack, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with the stack's MTP and microbatch inputs where they are not given."""
    return rows_defaults(phase, stack, [values])[0]


def rows_defaults(phase: str, stack, rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """:func:`input_defaults` of each of ``rows`` (the stack read once: a plan passes thousands)."""
    if stack is None or phase not in PHASES:
        return [dict(r) for r in rows]
    extra = {}
    if phase in ("decode", "afd"):
        extra["mtp_k"] = int(stack.mtp_draft_tokens) or 1
        extra["mtp_acceptance"] = float(stack.mtp_acceptance)
    if not bool(stack.two_batch_overlap):
        extra["microbatches"] = 1
    if stack.expert_balance == "none":  # no EPLB: the model's measured real-traffic balance
        extra["expert_imbalance"] = "default"
    out = []
    for r in rows:
        r = dict(r)
        for k, v in extra.items():
            r.setdefault(k, v)
        out.append(r)
    return out


DEFAULT_ROUTER = "round_robin"  # ASSUMPTION where no stack (or a profile without prefill_router) says: as decode


def prefill_router(stack) -> str:
    """How a PD deployment's router sends prompts to its prefill instances (the profile's
    ``prefill_router``; docs/model.md §12.3): round_robin where no stack says (each request to
    an instance at its arrival, in turn, as the decode instances take them)."""
    value = None if stack is None else (stack.get("prefill_router") if isinstance(stack, dict) else stack.prefill_router)
    if isinstance(value, dict):
        value = value.get("value")
    return value or DEFAULT_ROUTER

