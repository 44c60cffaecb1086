"""Plan a deployment: split an NPU budget into instances and find the request rate it serves
within the SLOs (docs/model.md §9).

    >>> from cmperf.plan import plan, default_workload
    >>> p = plan(default_workload())
    >>> p.best["goodput_rps"], p.best["prefill_instances"], p.best["decode_instances"]

A deployment is a set of instances of the shapes in :mod:`cmperf.plan.shapes`, each timed by
``cmperf predict`` (:mod:`cmperf.plan.instances`). At arrival rate λ:

    TTFT = W_q(λ) + A(λ) + pass + KV transfer + J(λ)          (prefill; docs/model.md §9.3)
        W_q   waiting for a place in a pass: M/G/c (cmperf/plan/queueing.py) with c = the
              prompts all passes in flight hold (whole prompts packed FCFS under the budget:
              instances.packed_passes), service = one pass, scv = prompts per pass x the
              pass time's scv (a pass's slots are one server)
        A     waiting for the running pass to end before joining the next: the residual of
              a pass when the instance is busy, mean ρ pass (1 + scv) / 2, p90 pass (1 - 0.1 / ρ)+
              (none when a pass holds one prompt: the instance is a server of the queue)
        pass  its own: the backlog's when busy, one prompt's alone when idle
        KV    the prompt's share of its pass's transfer, (k + 1) / (2k) of it (k prompts in turn)
        J     waiting for the decode step it joins: the residual of a step, (1 - e^-L) T / 2
    TPOT = TPOT(b), b the batch where the decode capacity curve meets λ / instances

The goodput is the largest λ with TTFT (mean or p90) and TPOT within their SLOs (or the
given rate, when it is met): min(prefill's λ, decode's λ). Every combination of instance
sizes, counts and batches is evaluated as arrays; nothing loops over deployments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from ..cost.pool import (cache_block_tokens, can_cache, hbm_cache_share, no_cache_error, pass_with_pool_s, pool_read_s,
                         pool_write_s, served_hit)
from ..errors import ConfigError, short, whole_number
from ..predict import Specs, load_specs, system_model
from ..stack import prefill_router
from . import instances, shapes
from .queueing import greedy_instance, largest_rate, mean_wait_s, wait_quantile_s
from .supernode import supernode_sets
from .workload import SLO, Workload, fixed, stat_quantile

SHAPES = ("pd", "colocated", "afd")
MAX_NPUS = 100_000


def default_workload() -> Workload:
    """The paper's setting: 4K prompts, 256-token outputs, TTFT <= 2 s, TPOT <= 50 ms."""
    return Workload(prompt=fixed(4096), output=fixed(256), prefix_hit=0.0, slo=SLO(ttft_s=2.0, tpot_s=0.050))


@dataclass
class Plan:
    workload: Workload
    settings: dict  # budget, supernode, KV tier, pool path: how the plan was made
    table: pd.DataFrame  # every deployment evaluated, best first
    specs: Specs | None = field(repr=False, default=None)  # the specs it was planned on (supernode, tiers applied)
    instances: dict = field(repr=False, default_factory=dict)  # the predict tables behind it
    decode_curves: dict = field(repr=False, default_factory=dict)  # shape -> instances.DecodeCurves of its decode options
    message: str = ""  # why no deployment meets the SLOs (or the given rate); '' when one does

    @property
    def best(self) -> dict | None:
        return self.table.iloc[0].to_dict() if len(self.table) and self.table["goodput_rps"].iat[0] > 0 else None

    def runners_up(self, n: int = 5) -> pd.DataFrame:
        """The next best deployments of other instance sizes (best of each distinct shape,
        prefill size, prefill batch and decode size), and the best of every other shape."""
        if len(self.table) == 0:
            return self.table
        keys = ["shape", "prefill_dies", "prefill_tp", "prefill_tokens_per_npu", "decode_dies", "decode_tp", "attention_dies"]
        distinct = self.table.drop_duplicates(keys)
        shapes_best = self.table.drop_duplicates(["shape"])
        picked = pd.concat([distinct.head(n + 1), shapes_best]).drop_duplicates("rank").sort_values("rank")
        return picked.iloc[1:]


# --------------------------------------------------------------------------- queueing terms
def alignment_s(rho, period_s, stat: str):
    """Waiting for the running pass (or iteration) to end: with probability ρ the instance is
    busy and the residual is uniform on (0, period), P(A > t) = ρ (1 - t / period): mean
    ρ period / 2, the q-quantile period (1 - (1 - q) / ρ)+ (p90: (1 - 0.1 / ρ)+; p50: 0 while
    the instance is busy less than half the time)."""
    rho = np.clip(np.asarray(rho, dtype=float), 0.0, 1.0)
    q = stat_quantile(stat)
    if q is None:
        return rho * period_s / 2.0
    return period_s * np.maximum(1.0 - (1.0 - q) / np.maximum(rho, 1e-12), 0.0)


def greedy_busy(rate, pass_s):
    """The share of time one prefill instance is busy when it starts a pass the moment a
    prompt waits (SGLang's scheduler), every pass taking ``pass_s`` whatever it carries (the
    groups a pass does not fill idle; docs/model.md §9.3): a busy period is passes back to back
    while each sees an arrival, K of them with P(K > k) = q^k, q = 1 - e^(-x), x = rate pass_s,
    so E[busy] = pass_s e^x against an idle 1 / rate:  beta = x e^x / (1 + x e^x) (>= the
    utilisation x / c of c-prompt passes: a pass of one prompt costs a full one). Written as
    1 / (1 + e^(-x) / x), it is finite at any x: x e^x overflows to inf near x = 710, and
    inf / inf was NaN (a plan of 100,000 NPUs offers a prefill instance tens of thousands of
    prompts a second)."""
    x = np.asarray(rate, dtype=float) * np.asarray(pass_s, dtype=float)
    with np.errstate(divide="ignore", over="ignore"):  # 1 / (1 + 1 / (x e^x)): finite at any x (0 at x = 0)
        return 1.0 / (1.0 + np.exp(-x) / x)


def ttft_terms(rate, servers, service_s, scv, period_s, fixed_s, stat: str, instances=None, join_s=0.0,
               lone_s=None, routed=None, state=None) -> dict:
    """TTFT at ``rate`` and its parts (module docstring). ``instances``: the prefill instances
    the servers belong to; one instance is busy, when it passes greedily, :func:`greedy_busy`
    of the time (more than the utilisation), which sets the chance a prompt waits for a pass;
    an instance whose pass holds one prompt is a plain server of the queue (no alignment: the
    queue's wait is the whole wait). ``join_s``: the wait for the decode step a request joins
    (:func:`decode_join_s`), added as it is. ``lone_s``: the pass of one prompt; given, the
    request's own pass is added to ``fixed_s``: a prompt that finds its instance idle starts a
    pass of its own (``lone_s``), one that finds it busy joins the next, which carries the
    backlog (``service_s``): (1 - busy) lone + busy service (docs/model.md §9.3).

    ``routed`` (``(arrival_scv, count_s)``, with ``instances``; NaN ``arrival_scv``: the terms
    above): each instance has its own stream of prompts (a router that assigns each request at
    its arrival; docs/model.md §9.3), ``rate / instances`` a second whose
    gaps have squared coefficient of variation ``arrival_scv`` (1 at random, 1/n in turn), its
    passes greedy and as long as what they carry (``count_s``: the pass of 1 + (K - 1) u prompts
    on ``queueing.COUNT_GRID``, K = servers / instances). The mean's queue, alignment and own
    pass are that chain's (:func:`queueing.greedy_instance`, warm started from ``state``, the
    new one returned as ``state``); a quantile keeps the terms above per instance, its M/G/K
    wait at Allen–Cunneen's (arrival scv + slot scv) / 2."""
    rate = np.asarray(rate, dtype=float)
    if routed is not None and instances is not None:
        return _routed_terms(rate, servers, service_s, scv, period_s, fixed_s, stat, instances, join_s, lone_s, *routed,
                             state=state)
    q = stat_quantile(stat)
    wait = mean_wait_s(rate, servers, service_s, scv) if q is None else wait_quantile_s(rate, servers, service_s, scv, q)
    rho = rate * service_s / servers
    if instances is not None:
        n = np.asarray(instances, dtype=float)
        rho = np.where(n == 1, np.maximum(rho, greedy_busy(rate, period_s)), rho)
        rho = np.where(np.asarray(servers, dtype=float) <= n, 0.0, rho)
    align = alignment_s(rho, period_s, stat)
    join = np.broadcast_to(np.asarray(join_s, dtype=float), np.shape(wait))
    busy = np.clip(rho, 0.0, 1.0)
    own = 0.0 if lone_s is None else (1.0 - busy) * np.asarray(lone_s, dtype=float) + busy * np.asarray(service_s, dtype=float)
    return {"queue_s": wait, "align_s": align, "join_s": join, "pass_s": own + np.zeros(np.shape(wait)),
            "ttft_s": wait + align + fixed_s + own + join}


def _routed_terms(rate, servers, service_s, scv, period_s, fixed_s, stat, instances, join_s, lone_s, arrival_scv,
                  count_s, largest=None, state=None) -> dict:
    """:func:`ttft_terms` where instances have their own streams (its ``routed`` case);
    ``largest``: one instance's largest rate, found by its search, which the rate per instance
    stays a billionth below (``n_p × λ`` over ``n_p`` may round above ``λ``, and where the closure
    loses its fixed point near capacity the root is that edge)."""
    rate, n = np.broadcast_arrays(rate, np.asarray(instances, dtype=float))
    shape = rate.shape
    flat = lambda v: np.broadcast_to(np.asarray(v, dtype=float), shape).ravel()  # noqa: E731
    servers, service_s, scv, period_s, arrival_scv, join, fixed = (
        flat(v) for v in (servers, service_s, scv, period_s, arrival_scv, join_s, fixed_s))
    lone = None if lone_s is None else flat(lone_s)
    n, lam = n.ravel(), (rate / n).ravel()
    if largest is not None:  # a hair inside it: the search's root can be the closure's last fixed point (§9.3)
        lam = np.minimum(lam, flat(largest) * (1.0 - 1e-9))
    K = np.maximum(servers / n, 1.0)
    own_stream = np.isfinite(arrival_scv)
    # the shared queue's terms, and the same per instance at its own stream (Allen–Cunneen's arrival scv)
    base = ttft_terms(rate.ravel(), servers, service_s, scv, period_s, 0.0, stat, n, 0.0, lone)
    one = ttft_terms(lam, K, service_s, np.maximum(scv + np.where(own_stream, arrival_scv, 1.0) - 1.0, -1.0), period_s,
                     0.0, stat, np.ones(lam.size), 0.0, lone)
    queue, align, own = (np.where(own_stream, one[k], base[k]) for k in ("queue_s", "align_s", "pass_s"))
    y = np.full((3, lam.size), np.nan)
    if state is not None and np.shape(state) == y.shape:
        y = np.array(state, dtype=float)
    if stat == "mean":
        cs = np.asarray(count_s, dtype=float)
        cs = np.broadcast_to(cs, (lam.size, cs.shape[-1])) if cs.ndim == 1 or cs.shape[0] != lam.size else cs
        # the chain where the instance has its own stream and is stable (its full pass carries more than arrives
        # during it); past that every wait is infinite
        chain = own_stream & (K > 1)
        ok = np.flatnonzero(chain & (lam * cs[:, -1] < K))
        for x in (queue, align, own):
            x[chain] = np.inf
        if ok.size:
            g, y[:, ok] = greedy_instance(lam[ok], arrival_scv[ok], K[ok], cs[ok], y[:, ok], largest is not None)
            if largest is not None:  # no fixed point found at or below the instance's largest rate, where the
                # search found one: walk up to the rate from 0.9 of it, each step warm started from the last
                lost = np.flatnonzero(~np.isfinite(g["own_s"]))
                if lost.size:
                    i = ok[lost]
                    path = lam[i][None, :] * np.linspace(0.9, 1.0, 9)[:, None]
                    z = None
                    for x in path:
                        h, z = greedy_instance(x, arrival_scv[i], K[i], cs[i], z, True)
                    for key in g:
                        g[key][lost] = h[key]
                    y[:, i] = z
            with np.errstate(divide="ignore", invalid="ignore"):  # 1 + the pass time's scv at a given count
                spread = np.where(service_s[ok] > 0, period_s[ok] / service_s[ok], 1.0)
            # where the closure still finds no fixed point below the rate its search met the SLO at (a handful of
            # rows, at the edge of its last fixed point), the instance's M/G/K terms above stand
            keep = np.isfinite(g["own_s"]) | (largest is None)
            queue[ok] = np.where(keep, g["queue_s"], queue[ok] if largest is None else one["queue_s"][ok])
            align[ok] = np.where(keep, g["align_s"] * spread, one["align_s"][ok])
            own[ok] = np.where(keep, g["own_s"], one["pass_s"][ok])
    out = {"queue_s": queue, "align_s": align, "join_s": join, "pass_s": own, "ttft_s": queue + align + fixed + own + join}
    out = {k: v.reshape(shape)[()] for k, v in out.items()}
    out["state"] = y
    return out


def decode_join_s(curves, which, decode_instances, rate, output_tokens: float, stat: str) -> np.ndarray:
    """Waiting for the decode step a request joins (docs/model.md §9.3): its KV arrives while
    its decode instance runs a step, and it joins the batch (its first token, computed by
    prefill, reaches the client) when that step ends. The instance holds ``L = rate / n_d x
    E[O] x TPOT`` requests (Little's law) and runs steps whenever it holds one: busy with
    probability ``1 - e^-L`` (M/G/inf); the residual of a step of ``T`` (the iteration at the
    operating batch) is uniform on (0, T): :func:`alignment_s` with that busy share and period."""
    per_instance = np.asarray(rate, dtype=float) / np.asarray(decode_instances, dtype=float)
    _, tpot = curves.at_rate(which, per_instance)
    step = curves.step_at_rate(which, per_instance)
    busy = -np.expm1(-per_instance * output_tokens * tpot)
    return alignment_s(busy, step, stat)


# --------------------------------------------------------------------------- the plan
def _shown(v) -> str:
    return repr(short(v, 40)) if isinstance(v, str) else short(v, 40)


def plan(workload: Workload | None = None, hardware: str = "cloudmatrix384", model: str | None = None,
         sets: Iterable[str] = (), npus: int | None = None, supernode: int | None = None,
         shape_names: Iterable[str] = SHAPES, kv_tier: str | None = None, pool_path: str | None = None,
         working_set_tokens: float | None = None, block_tokens: int | None = None,
         progress: Callable[[int, int], None] | None = None, deployment=None, specs: Specs | None = None,
         stack: str | None = None) -> Plan:
    """The best deployment of ``npus`` NPUs (default: one whole supernode) for ``workload``;
    with ``deployment`` (a :class:`cmperf.simulate.deployment.DeploymentSpec`), that
    deployment alone, evaluated (its instances and counts fixed; the planner still picks the
    prompts per prefill pass and reads the decode batch off Little's law). ``specs`` replaces
    loading ``hardware``/``model``/``sets``/``stack``."""
    # the API's counts as given (the CLI's --npus and --supernode are checked, and named, where it reads them)
    npus = None if npus is None else whole_number(npus, f"plan(npus={_shown(npus)})", 1, MAX_NPUS)
    supernode = None if supernode is None else whole_number(supernode, f"plan(supernode={_shown(supernode)})", 1, MAX_NPUS)
    workload = workload or default_workload()
    if deployment is not None:
        shape_names = ("afd",) if deployment.decode_phase == "afd" else ("colocated",) if deployment.colocated else ("pd",)
        if deployment.colocated and len(deployment.decode) != 1:
            raise ConfigError("plan evaluates a deployment of one co-located instance kind (give one --colocated)")
        if not deployment.colocated and (len(deployment.prefill) != 1 or len(deployment.decode) != 1):
            raise ConfigError("plan evaluates a deployment of one prefill and one decode instance kind (give one "
                              "--prefill and one --decode)")
    shape_names = tuple(shape_names)
    unknown = [s for s in shape_names if s not in SHAPES]
    if unknown or not shape_names:
        raise ConfigError(f"--shapes {','.join(shape_names)}: expected some of {', '.join(SHAPES)}")
    sets = list(sets)
    if specs is not None:  # named from the views: validated specs (pydantic, ~0.1 s) only where a tier changes
        hw, m = specs.views()
        hardware, model = hw.system.name, m.name
    else:
        model = model or system_model(hardware)
        specs = load_specs(hardware, model, sets, stack)
    hw, m = specs.views()
    node_npus = int(hw.system.node.chips)
    system_npus = int(hw.system.nodes) * node_npus
    hits = "--prefix-hit" if workload.cached_samples is None else f"--trace {workload.prompt.text}: prefix_hit_tokens"
    caching = {hits: workload.prefix_hit > 0 or workload.cached_samples is not None,
               "--pool-path": pool_path is not None, "--block-tokens": block_tokens is not None}
    pool_asked = {k: v for k, v in caching.items() if k != hits}
    if hw.system.memory_pool is None and any(pool_asked.values()):
        flag = next(f for f, asked in pool_asked.items() if asked)
        raise ConfigError(f"{flag}: system {hw.system.name} has no memory pool (`memory_pool`, EMS) to cache KV in")
    if caching[hits] and not can_cache(hw):
        raise no_cache_error(hw, hits)
    extra = supernode_sets(hw, supernode) if supernode is not None else []
    if block_tokens is not None:
        if not (isinstance(block_tokens, int) and 1 <= block_tokens <= 1_000_000):
            raise ConfigError(f"--block-tokens {block_tokens}: expected a whole number of tokens from 1 to 1,000,000")
        extra.append(f"system.memory_pool.block_tokens={block_tokens}")
    if extra:
        specs = load_specs(hardware, model, sets + extra, specs.stack_name or "none")
        hw, m = specs.views()
        system_npus = supernode or system_npus
    dpp = int(hw.chip.dies_per_package)
    if deployment is not None:
        npus = _deployment_npus(deployment, dpp)
    npus = system_npus if npus is None else npus
    if not 1 <= npus <= MAX_NPUS:
        raise ConfigError(f"--npus {npus}: expected 1 to {MAX_NPUS:,} NPUs")
    several = npus > system_npus
    tier = kv_tier or hw.system.kv_transfer_tier
    # a tier the user gave is named by its flag; the system's own, by the spec field
    tier_named = f"--kv-tier {tier}" if kv_tier else f"the KV transfer tier '{tier}' (system.kv_transfer_tier; give --kv-tier)"
    tiers = list(hw.system.tiers.keys())
    for flag, name in (("--kv-tier", tier), ("--pool-path", pool_path)):
        if name is not None and name not in tiers:
            raise ConfigError(f"{flag} {name}: system {hw.system.name} has tiers {', '.join(tiers)}")
    domain = hw.system.tiers[tier].domain_chips
    reach = [t for t in tiers if hw.system.tiers[t].domain_chips is None or hw.system.tiers[t].domain_chips >= npus]
    set_tier = any(str(x).split("=", 1)[0].strip() == "system.kv_transfer_tier" for x in sets)
    if kv_tier is None and not set_tier and domain is not None and domain < npus and reach:
        # the system's tier does not reach the budget (UB inside one SuperPoD of --npus 100000):
        # the nearest tier that connects every prefill instance to every decode instance does
        tier, domain = reach[0], hw.system.tiers[reach[0]].domain_chips
    if several and domain is not None:
        raise ConfigError(f"{tier_named}: {npus} NPUs span several {system_npus}-NPU systems and tier '{tier}' "
                          f"stops at {domain} NPUs; prefill and decode may sit apart: use a tier without a domain (e.g. "
                          f"{tiers[-1]})")
    if domain is not None and domain < npus:  # any prefill instance may send to any decode instance of the budget
        raise ConfigError(f"{tier_named}: tier '{tier}' connects {int(domain)} NPU(s) per domain, fewer than the "
                          f"{npus} NPUs whose prefill and decode instances it would connect (tiers that reach them all: "
                          f"{', '.join(reach)})")
    if pool_path is not None:
        pool_domain = hw.system.tiers[pool_path].domain_chips
        if pool_domain is not None and pool_domain < system_npus:  # the pool is the DRAM of every node
            raise ConfigError(f"--pool-path {pool_path}: tier '{pool_path}' connects {int(pool_domain)} NPU(s) per "
                              f"domain; the pool, the CPU DRAM of every node, is read over a tier that reaches all "
                              f"{system_npus} (e.g. {', '.join(t for t in reach if t != pool_path) or tiers[-1]})")
    specs = _with_system(specs, tier, pool_path)
    hw, m = specs.views()
    pool_path = hw.system.memory_pool.tier if hw.system.memory_pool is not None else None
    dpp = int(hw.chip.dies_per_package)
    budget_dies = npus * dpp
    limit_dies = min(budget_dies, system_npus * dpp)

    # the cache tiers' capacity (docs/model.md §9.5): the HBM tier's that of the system's default
    # prefill instance (the instances are chosen after the hit is known)
    hbm = (instances.hbm_instance_tokens(specs, workload, {}) if working_set_tokens is not None and workload.prefix_hit > 0
           and hbm_cache_share(hw) > 0 else 0.0)
    asked = workload.prefix_hit
    hit, pool_tokens, pool_part = served_hit(hw, m, workload, working_set_tokens, hbm)
    block = cache_block_tokens(hw, specs.stack_view())
    if hit != workload.prefix_hit or block != workload.block_tokens or pool_part != workload.pool_part:
        workload = Workload(**{**workload.__dict__, "prefix_hit": hit, "block_tokens": float(block), "pool_part": pool_part})
    computed = workload.computed
    steps = 2 + ("colocated" in shape_names) + ("afd" in shape_names)
    tick = progress or (lambda done, total: None)

    # instance options, each a predict row: whole-token lengths (the means of a distribution, rounded)
    prompt_len = max(round(workload.prompt.mean), 1)
    cached_len = min(round(workload.prompt.mean - computed.mean), prompt_len - 1)
    # the pool-held tail of the prefix, in whole pool blocks (the head in HBM)
    pool_len = min(math.ceil(cached_len * workload.pool_part / block) * block, cached_len) if hw.system.memory_pool is not None else 0
    cached = {"cached_len": cached_len, "pool_len": int(pool_len)} if cached_len > 0 else {}
    # a pass's causal attention over prompts of computed lengths c_i is sum c_i (C + (c_i + 1) / 2):
    # per token that of one token-weighted length E[c^2] / E[c] = E[c] (1 + scv), not of the mean
    # (docs/model.md §9.2); its prompts per pass stay tokens / E[c]
    pass_len = cached_len + max(round(computed.mean * (1.0 + computed.scv)), 1)
    pre_rows = shapes.prefill_rows(hw, m, limit_dies, pass_len - cached_len, pass_len, cached)
    layouts = shapes.decode_layouts(hw, m, limit_dies)
    fixed = None
    if deployment is not None:  # the given instances only (co-located: as many as the budget, its count, holds)
        dg = deployment.decode[0]
        layouts = [dict(dg.inputs)] if deployment.decode_phase == "decode" else []
        if not deployment.colocated:
            pg = deployment.prefill[0]
            per_pass = [{"tokens_per_npu": k * (pass_len - cached_len), "prompt_len": pass_len, **cached}
                        for k in shapes.PREFILL_PROMPTS_PER_NPU]
            pre_rows = [{**r, **pg.inputs, "ep": pg.inputs.get("ep", pg.inputs["dies"])} for r in per_pass]
            fixed = (pg.count, dg.count)
    pre_rows = _within_stack("prefill", pre_rows, specs, dpp)
    router = prefill_router(specs.stack_view())
    pre = instances.run("prefill", pre_rows, specs)
    # where instances have their own streams (the chain, §9.3), the same layouts at whole-prompt passes below
    # each budget: a greedy pass carries what waited (instances.count_rows; the cost model steps between them)
    more = instances.count_rows(pre_rows, computed.mean, dpp) if router != "shared" else []
    pre_counts = instances.run("prefill", more, specs) if more else None
    # varying lengths: the same options at twice the pass's prompt length, for the time of a pass
    # whose computed-weighted length is another than the mean's (instances.packed_passes)
    pre_long = None
    if computed.scv > 0 or computed.samples is not None:
        pre_long = instances.run("prefill", [{**r, "prompt_len": cached_len + 2 * (r["prompt_len"] - cached_len)}
                                             for r in pre_rows], specs)
    tick(1, steps)
    dec_common = {"prompt_len": prompt_len, "output_len": max(round(workload.output.mean), 1),
                  "kv_len": workload.decode_kv_len}
    dec = instances.run("decode", _within_stack("decode", shapes.decode_rows(layouts, dec_common), specs, dpp), specs)
    tick(2, steps)
    curves = instances.decode_curves(dec, dpp, workload.output.mean)
    sides: dict = {}  # the prefill side's searches, shared by PD and AFD (_disaggregated)
    tables = [_disaggregated("pd", pre, curves, workload, computed, budget_dies, dpp, fixed, hw, pre_long, pre_counts,
                             router, sides)] if "pd" in shape_names else []
    colo = afd = pd.DataFrame()
    afd_curves = None
    if "colocated" in shape_names:
        colo = instances.run("decode", _colocated_rows(dec, dec_common, workload.slo.tpot_s), specs)
        tables.append(_colocated(colo, workload, budget_dies, dpp))
        tick(3, steps)
    if "afd" in shape_names:
        afd_rows = shapes.afd_rows(hw, m, limit_dies, dec_common)
        if deployment is not None:
            afd_rows = [{**dec_common, **deployment.decode[0].inputs, "batch": b} for b in shapes.DECODE_BATCHES]
        afd = instances.run("afd", _within_stack("afd", afd_rows, specs, dpp), specs)
        afd_curves = instances.decode_curves(afd, dpp, workload.output.mean, ("attention_dies", "expert_dies"),
                                             "attention_dies", ("attention_dies", "expert_dies"))
        tables.append(_disaggregated("afd", pre, afd_curves, workload, computed, budget_dies, dpp, fixed, hw, pre_long,
                                     pre_counts, router, sides))
        tick(steps, steps)
    table = pd.concat([t for t in tables if len(t)], ignore_index=True) if any(len(t) for t in tables) else _empty()
    table = _rank(table, workload)
    settings = {"hardware": hardware, "model": model, "sets": sets, "npus": npus, "supernode_npus": system_npus,
                "kv_tier": tier, "pool_path": pool_path, "prefix_hit_asked": asked, "prefix_hit_served": hit, "pool_tokens": pool_tokens,
                "hbm_cache_tokens": hbm if working_set_tokens is not None else None, "prefix_pool_share": pool_part,
                "shapes": list(shape_names)}
    result = Plan(workload=workload, settings=settings, table=table, specs=specs,
                  instances={"prefill": pre, "decode": dec, "colocated": colo, "afd": afd},
                  decode_curves={"pd": curves, "afd": afd_curves})
    result.message = _message(result)
    return result


def _with_system(specs: Specs, kv_tier: str, pool_tier: str | None) -> Specs:
    """``specs`` with the KV transfer over ``kv_tier`` and the pool read over ``pool_tier``
    (choices of the plan, not numbers: they are not ``--set`` overrides)."""
    view = specs.views()[0].system
    if kv_tier == view.kv_transfer_tier and (pool_tier is None or pool_tier == view.memory_pool.tier):
        return specs
    system = specs.hardware.system
    update = {}
    if kv_tier != system.kv_transfer_tier:
        update["kv_transfer_tier"] = kv_tier
    if pool_tier is not None and pool_tier != system.memory_pool.tier:
        update["memory_pool"] = system.memory_pool.model_copy(update={"tier": pool_tier})
    hardware = specs.hardware
    return specs.with_hardware(type(hardware)(system=system.model_copy(update=update), chip=hardware.chip,
                                              system_path=hardware.system_path, chip_path=hardware.chip_path))


def curves(p: Plan, row, rates) -> dict:
    """TTFT (and its parts) and TPOT of deployment ``row`` at each of ``rates`` (requests/s):
    the same terms the plan ranked it by, against the rate (for ``--plot``)."""
    rates = np.asarray(rates, dtype=float)
    k = int(row["_decode_curve"])
    join = 0.0
    if k >= 0:
        join = decode_join_s(p.decode_curves[row["shape"]], np.full(len(rates), k), np.full(len(rates), row["decode_instances"]),
                             rates, p.workload.output.mean, p.workload.slo.ttft_stat)
    scv_a = row.get("_arrival_scv", math.nan)
    routed = None if scv_a is None or not np.isfinite(scv_a) else (scv_a, np.asarray(row["_counts_s"], dtype=float))
    out = ttft_terms(rates, row["_servers"], row["_service_s"], row.get("_scv", p.workload.computed.scv), row["_period_s"],
                     row["_fixed_s"], p.workload.slo.ttft_stat, row.get("_instances"), join, row.get("_lone_s"), routed)
    if k >= 0:
        c = p.decode_curves[row["shape"]]
        _, tpot = c.at_rate(np.full(len(rates), k), rates / row["decode_instances"])
        cap = c.capacity_rps[k][-1] * row["decode_instances"]
        tpot = np.where(rates <= cap, tpot, np.inf)  # beyond the largest batch that fits: the queue grows
    else:
        tpot = np.where(rates <= row["decode_max_rps"], row["_tpot_pass_s"], np.inf)
    out["tpot_s"] = tpot
    return out


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=["rank", "shape", "goodput_rps"])


def _deployment_npus(deployment, dpp: int) -> int:
    """NPUs a given deployment uses."""
    dies = sum(g.count * g.inputs["dies"] for g in deployment.prefill)
    for g in deployment.decode:
        dies += g.count * (g.inputs["attention_dies"] + g.inputs["expert_dies"] if deployment.decode_phase == "afd"
                           else g.inputs["dies"])
    return max(math.ceil(dies / dpp), 1)


def _within_stack(phase: str, rows: list[dict], specs: Specs, dpp: int) -> list[dict]:
    """The instance options the serving stack's limits allow (cmperf/stack.py): a decode batch
    of at most ``max_running_per_rank`` requests per DP-attention rank, a prefill pass of at
    most ``max_prefill_tokens`` per attention DP group (at least one prompt per group)."""
    st = specs.stack_view()
    if st is None or not rows:
        return rows
    out = []
    for r in rows:
        if phase in ("decode", "afd") and st.max_running_per_rank is not None:
            rank_dies = (r.get("tp") or 1) if phase == "decode" else 1
            if r["batch"] * rank_dies / dpp > st.max_running_per_rank + 1e-9:
                continue
        if phase == "prefill":
            tp = r.get("attn_tp") or 1
            per_group = r["tokens_per_npu"] / dpp * tp
            if per_group > st.max_prefill_tokens + 1e-9 and per_group > r["prompt_len"] - r.get("cached_len", 0) + 1e-9:
                continue
        out.append(r)
    return out or rows[:1]


def evaluate(specs: Specs, workload: Workload, deployment) -> dict:
    """The closed-form plan of one given deployment (:func:`plan` with ``deployment``): its
    best row as plain data, goodput 0 when it meets the SLOs at no rate."""
    p = plan(workload, specs=specs, deployment=deployment)
    if not len(p.table):
        return {"goodput_rps": 0.0, "binding": p.message}
    row = public(p.table).iloc[0].to_dict()
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}


RR_STREAMS = (1, 2, 3, 4, 6, 8, 16, 64, 1024)  # n of round robin's 1/n: past 8 the gaps are nearly even


def arrival_scv(router: str, instances) -> np.ndarray:
    """The squared coefficient of variation of the gaps between the prompts one prefill
    instance gets (docs/model.md §9.3): 1 at random (a Poisson stream split at random is
    Poisson); 1/n in turn over n instances (every n-th of a Poisson stream: Erlang-n gaps; n
    on the ladder ``RR_STREAMS``, nearest in its log: one solution serves the counts near it;
    least_load routes prompts of one length as round robin does, docs/model.md §12.5); NaN
    where instances share one queue (the M/G/c terms, for every count)."""
    n = np.asarray(instances, dtype=float)
    if router == "random":
        return np.ones(n.shape)
    if router == "shared":  # a single instance too: its M/G/c terms hold it (docs/model.md §12.5), at no chain's cost
        return np.full(n.shape, np.nan)
    ladder = np.asarray(RR_STREAMS, dtype=float)
    near = ladder[np.abs(np.log(np.maximum(n, 1.0))[..., None] - np.log(ladder)).argmin(axis=-1)]
    return 1.0 / near


def _disaggregated(shape: str, pre: pd.DataFrame, curves, workload: Workload, computed, budget_dies: int,
                   dpp: int, fixed: tuple | None = None, hw=None, pre_long: pd.DataFrame | None = None,
                   pre_counts: pd.DataFrame | None = None, router: str = "shared", sides: dict | None = None) -> pd.DataFrame:
    """Every deployment of prefill instances and separate decode instances (PD: decode
    instances; AFD: attention/expert split instances): prefill option x count x decode option,
    each decode option at the fewest instances that carry the prefill side's rate (or all that
    fit in what is left), and one row per pairing of a prefill and a decode option, its count
    of prefill instances that ranks first (:func:`_first_per_pairing`): rows grow with the
    options, not with the budget. ``sides``: the prefill sides found so far in this plan
    (:func:`_prefill_side`, by the longest wait for a decode step they assume), which PD and
    AFD share when that wait is the same (one model, one MTP setting)."""
    slo = workload.slo
    pre = pre[pre["fits"]] if len(pre) else pre
    if len(pre) == 0 or len(curves.dies) == 0:
        return _empty()
    # the prefill side's largest rate holds for any decode option it is paired with: the wait for
    # the decode step a request joins at its longest, a step at the TPOT SLO (docs/model.md §9.3)
    join_most = alignment_s(1.0, curves.step_at_tpot(slo.tpot_s), slo.ttft_stat)
    side = None if sides is None else sides.get(float(join_most))
    if side is None:
        side = _prefill_side(pre, workload, computed, budget_dies, dpp, fixed, hw, pre_long, pre_counts, router, join_most)
        if sides is not None:
            sides[float(join_most)] = side
    if side is None:
        return _empty()
    d_max, d_memory = curves.max_rate(slo.tpot_s)
    (i_idx, n_p, p_dies, pass_p, lone_p, count_p, kv_p, servers_p, slot_scv, period_p, scv_a, own, lam_row, warm,
     rate_p_all) = (side[k] for k in ("i_idx", "n_p", "p_dies", "pass_p", "lone_p", "count_p", "kv_p", "servers_p",
                                      "slot_scv", "period_p", "scv_a", "own", "lam_row", "warm", "rate_p_all"))
    given = workload.arrival_rate_per_s
    target = rate_p_all if given is None else np.minimum(rate_p_all, given)
    left = budget_dies - n_p * p_dies[i_idx]
    k_dies = curves.dies.astype(float)
    n_d_max = np.floor(left[:, None] / k_dies[None, :])  # (prefill pairs, decode sizes)
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where(d_max[None, :] > 0, np.ceil(target[:, None] / d_max[None, :] - 1e-9), 1.0)
    n_d_best = np.clip(need, 1.0, np.maximum(n_d_max, 1.0)) if fixed is None else np.full(need.shape, float(fixed[1]))
    a, k = np.nonzero(n_d_max > 0)
    a, k = _first_per_pairing(a, k, i_idx, n_p, p_dies, n_d_best, rate_p_all, d_max, k_dies, given)
    n_d = n_d_best[a, k]
    rate_p = rate_p_all[a]
    i = i_idx[a]
    pass_s, kv_s, servers, scv_s, period_s, lone_s = pass_p[a], kv_p[a], servers_p[a], slot_scv[a], period_p[a], lone_p[a]
    routed = (scv_a[a], count_p[a], lam_row[a]) if own.any() else None

    def ttft(rate):  # at the rate run: the wait for the decode step each request joins, of its pairing
        join = decode_join_s(curves, k, n_d, rate, workload.output.mean, slo.ttft_stat)
        return ttft_terms(rate, servers, pass_s, scv_s, period_s, kv_s, slo.ttft_stat, n_p[a], join, lone_s, routed,
                          warm[:, a])

    rate_d = d_max[k] * n_d
    pool = pre["pool_load_ms"].to_numpy(dtype=float)[i] / pre["forward_ms"].to_numpy(dtype=float)[i] if "pool_load_ms" in pre else 0.0
    rate, binding = _operating(rate_p, rate_d, workload.arrival_rate_per_s,
                               np.where(d_memory[k], DECODE_MEMORY, DECODE_TPOT),
                               np.where(np.asarray(pool) > 0.5, PREFILL_POOL, PREFILL_TTFT))
    t = ttft(rate)
    batch, tpot = curves.at_rate(k, rate / n_d)
    queue = {"_servers": servers, "_service_s": pass_s, "_period_s": period_s, "_fixed_s": kv_s, "_instances": n_p[a],
             "_scv": scv_s, "_lone_s": lone_s, "_arrival_scv": scv_a[a],
             "_counts_s": list(count_p[a]),
             "_decode_curve": k, "_tpot_pass_s": np.zeros(len(k))}
    per_curve = lambda c, default: np.array([key.get(c, default) for key in curves.keys], dtype=float)[k]  # noqa: E731
    split = {c: per_curve(c, 0.0) for c in ("attention_dies", "expert_dies")}
    split["decode_tp"] = per_curve("tp", 1.0)
    split["prefill_tp"] = pre["attn_tp"].to_numpy(dtype=float)[i]
    return _frame(shape, workload, rate, binding, n_p=n_p[a], p_dies=p_dies[i], split=split,
                  tokens_per_npu=pre["tokens_per_npu"].to_numpy(dtype=float)[i], n_d=n_d, d_dies=k_dies[k],
                  batch=batch, tpot=tpot, t=t, pass_s=t["pass_s"], kv_s=kv_s, dpp=dpp,
                  rate_p=rate_p, rate_d=rate_d, queue=queue)


def _prefill_side(pre: pd.DataFrame, workload: Workload, computed, budget_dies: int, dpp: int, fixed: tuple | None,
                  hw, pre_long: pd.DataFrame | None, pre_counts: pd.DataFrame | None, router: str,
                  join_most: float) -> dict | None:
    """The prefill side of :func:`_disaggregated` (``pre``: its fitting options): every option at
    every count of instances, its queue's parameters and its largest rate within the TTFT SLO
    when each request waits ``join_most`` for the decode step it joins; None without any."""
    slo = workload.slo
    # prefill option i with n_p instances (the prefill side depends only on this pair: its
    # largest rate once per pair), then decode size k in what is left, with the fewest
    # instances n_d that carry the prefill side's rate (more add NPUs, never goodput)
    p_dies = pre["dies"].to_numpy(dtype=float)
    counts = ([np.array([fixed[0]])] * len(p_dies) if fixed is not None
              else [instance_counts(int(x)) for x in np.floor(budget_dies / p_dies)])
    i_idx = np.repeat(np.arange(len(pre)), [len(c) for c in counts])
    if len(i_idx) == 0:
        return None
    n_p = np.concatenate(counts).astype(float)
    # a pass holds whole prompts FCFS within its budget: its prompts, time and the time's scv from
    # the length distribution's packing (docs/model.md §9.3; fixed lengths: floor(budget / c))
    packed = instances.packed_passes(pre.reset_index(drop=True), computed, dpp, pre_long, pre_counts)
    whole = instances.prompts_per_pass(pre["tokens_per_npu"].to_numpy(dtype=float)[i_idx], p_dies[i_idx] / dpp,
                                       computed.mean)
    prompts = np.where(whole >= 1, packed["prompts"][i_idx], 0.0)
    pass_scv = packed["scv"][i_idx]
    pass_p = pre["forward_ms"].to_numpy(dtype=float)[i_idx] / 1e3
    if hw is not None and hw.system.memory_pool is not None and "pool_write_bytes_per_die" in pre and (
            (pre["pool_bytes_per_die"] > 0) | (pre["pool_write_bytes_per_die"] > 0)).any():
        # every prefill die of the deployment reads and writes the pool: n_p instances share its memory servers
        own = pre["pool_load_ms"].to_numpy(dtype=float)[i_idx] / 1e3
        wait = pre["pool_write_wait_ms"].to_numpy(dtype=float)[i_idx] / 1e3
        col = lambda k: pre[k].to_numpy(dtype=float)[i_idx]  # noqa: E731
        read = np.where(own > 0, pool_read_s(hw, col("pool_bytes_per_die"), col("pool_blocks_per_die"), n_p * p_dies[i_idx]), 0.0)
        write = np.where(col("pool_write_bytes_per_die") > 0, pool_write_s(hw, col("pool_write_bytes_per_die"),
                                                                           col("pool_write_blocks_per_die"), n_p * p_dies[i_idx]), 0.0)
        pass_p = pass_with_pool_s(pass_p - own - wait, read, write)
    lone_p = pass_p * packed["lone_share"][i_idx]  # a pass of one prompt
    count_p = pass_p[:, None] * packed["count_share"][i_idx]  # a pass of 1 + (K - 1) u prompts (queueing.greedy_instance)
    pass_p = pass_p * packed["time_share"][i_idx]
    # a pass's prompts leave over the link one after another: a prompt's KV arrives, on average,
    # after (k + 1) / 2 of the k prompts' transfers (docs/model.md §9.3)
    kv_p = (pre["kv_transfer_ms"].to_numpy(dtype=float)[i_idx] / 1e3 * packed["token_share"][i_idx]
            * (np.maximum(prompts, 1.0) + 1.0) / (2.0 * np.maximum(prompts, 1.0)))
    servers_p = np.maximum(prompts, 1.0) * n_p
    # the queue's slots are a pass's prompts, served together: k slots of one pass wait as one
    # server whose pass varies with scv_t when their service scv is k scv_t (docs/model.md §9.3);
    # the residual of a varying pass is E[t] (1 + scv_t) / 2
    slot_scv = np.maximum(prompts, 1.0) * pass_scv
    period_p = pass_p * (1.0 + pass_scv)

    # the prefill side's largest rate: per instance where each has its own stream (docs/model.md §9.3), once per
    # option and stream (n_p instances then carry n_p times one's rate), else over the shared queue's slots
    scv_a = arrival_scv(router, n_p)
    own = np.isfinite(scv_a)
    rate_p_all = np.zeros(len(n_p))
    lam_row = np.full(len(n_p), np.inf)  # one instance's largest rate, per row
    warm = np.full((3, len(n_p)), np.nan)  # its chain there (the closure can have two fixed points: keep the search's)
    if own.any():
        rows = np.flatnonzero(own)
        _, first, inv = np.unique(np.stack([i_idx[rows], scv_a[rows]]), axis=1, return_index=True, return_inverse=True)
        rep = rows[first]  # one row per option and stream

        last = np.full((3, len(rep)), np.nan)  # each stream's chain at its previous probe (a warm start)
        meet = np.full((3, len(rep)), np.nan)  # and at the last probe that met the SLO (the rate run starts there)

        def instance_over_s(x, u):  # TTFT beyond the SLO of one instance of streams u at x prompts a second
            j = rep[u]
            # warm started from the same stream's previous probe: a stream's probes follow its own bracket alone,
            # so its root is the same whatever other options a plan holds (plan --deployment evaluates to its row)
            out = ttft_terms(x * n_p[j], servers_p[j], pass_p[j], slot_scv[j], period_p[j], kv_p[j], slo.ttft_stat,
                             n_p[j], join_most, lone_p[j], (scv_a[j], count_p[j]), last[:, u])
            state, over = out.get("state"), out["ttft_s"] - slo.ttft_s
            if state is not None:
                last[:, u] = np.where(np.isfinite(state), state, last[:, u])
                meet[:, u] = np.where(over <= 0, state, meet[:, u])
            return over

        # to a millionth of one instance's capacity: each probe starts cold, so a key's root is the same in any plan
        lam_i = largest_rate(instance_over_s, (servers_p / pass_p / n_p)[rep], 1e-6)
        lam_row[rows] = lam_i[inv.ravel()]
        rate_p_all[rows] = lam_row[rows] * n_p[rows]
        warm[:, rows] = meet[:, inv.ravel()]
    if (~own).any():
        rows = np.flatnonzero(~own)

        def ttft_over_s(rate, j):  # TTFT beyond the SLO of pairs j at ``rate``
            j = rows[j]
            return ttft_terms(rate, servers_p[j], pass_p[j], slot_scv[j], period_p[j], kv_p[j],
                              slo.ttft_stat, n_p[j], join_most, lone_p[j])["ttft_s"] - slo.ttft_s

        rate_p_all[rows] = largest_rate(ttft_over_s, (servers_p / pass_p)[rows])
    rate_p_all = rate_p_all * (prompts >= 1)
    return {"i_idx": i_idx, "n_p": n_p, "p_dies": p_dies, "pass_p": pass_p, "lone_p": lone_p, "count_p": count_p,
            "kv_p": kv_p, "servers_p": servers_p, "slot_scv": slot_scv, "period_p": period_p, "scv_a": scv_a, "own": own,
            "lam_row": lam_row, "warm": warm, "rate_p_all": rate_p_all}


def _first_per_pairing(a, k, i_idx, n_p, p_dies, n_d, rate_p, d_max, k_dies, given):
    """Of the deployments (prefill pair ``a`` = option ``i_idx[a]`` x ``n_p[a]`` instances,
    decode option ``k`` at ``n_d[a, k]`` instances), the one per pairing of a prefill option
    and a decode option that ranks first (:func:`_rank`: most goodput, then fewest NPUs, then
    lowest TTFT, which for one prefill option at one rate is the most prefill instances):
    every other count of the pairing ranks below it, so the table keeps options x options
    rows, not options x counts x options. Returns the kept (a, k), in the order of the
    pairings (option, then decode option).

    No sort: each key narrows the deployments of a pairing in turn (the most served; of
    those, the fewest NPUs; of those, the most prefill instances; of those, the first), one
    pass over them each: a budget of thousands of NPUs has ~10^5-10^6 deployments, whose
    four-key lexsort was a fifth of a plan on the Atlas 960 SuperPoD."""
    if not len(a):
        return a, k
    nd = n_d[a, k]
    served = np.minimum(rate_p[a], d_max[k] * nd)
    served = served if given is None else np.minimum(served, given)
    count = n_p[a]
    npus = count * p_dies[i_idx[a]] + nd * k_dies[k]
    pairing = i_idx[a] * len(k_dies) + k
    pairings = int(pairing.max()) + 1
    keep = None
    for key, best, init in ((served, np.maximum, -np.inf), (npus, np.minimum, np.inf), (count, np.maximum, -np.inf)):
        top = np.full(pairings, init)
        best.at(top, pairing if keep is None else pairing[keep], key if keep is None else key[keep])
        keep = key == top[pairing] if keep is None else keep & (key == top[pairing])
    first = np.full(pairings, len(a))
    at = np.flatnonzero(keep)
    np.minimum.at(first, pairing[at], at)
    first = first[first < len(a)]
    return a[first], k[first]


EVERY_COUNT_UP_TO = 64  # instance counts evaluated one by one; above, a geometric ladder
COUNT_STEP = 1.05  # the ladder's ratio: the fewest instances that meet a rate are found within 5 %


def instance_counts(n_max: int) -> np.ndarray:
    """The counts of one instance option a plan evaluates: every count up to
    EVERY_COUNT_UP_TO, then a geometric ladder (ratio COUNT_STEP) to ``n_max``, which is
    always one: rows grow with the log of the budget, and the largest deployment of each
    option (the most goodput) is always evaluated."""
    if n_max < 1:
        return np.zeros(0, dtype=int)
    if n_max <= EVERY_COUNT_UP_TO:
        return np.arange(1, n_max + 1)
    steps = np.ceil(np.log(n_max / EVERY_COUNT_UP_TO) / np.log(COUNT_STEP))
    ladder = np.unique(np.floor(EVERY_COUNT_UP_TO * COUNT_STEP ** np.arange(1, steps + 1)).astype(int))
    return np.unique(np.concatenate([np.arange(1, EVERY_COUNT_UP_TO + 1), ladder[ladder < n_max], [n_max]]))


def _colocated_rows(dec: pd.DataFrame, common: dict, tpot_slo_s: float) -> list[dict]:
    """Co-located options: every decode layout and batch that fits and meets the TPOT SLO
    without a chunk, at every chunk of prompt tokens per NPU (a chunk only adds time and
    memory, docs/model.md §9.4); when none meets the SLO, each layout's smallest batch, so the
    plan can name the closest."""
    if len(dec) == 0:
        return []
    keys = ["dies", "ep", "tp", "redundant_experts", "shared_copies", "batch"]
    fits = dec[dec["fits"]]
    meets = fits[fits["tpot_ms"] <= tpot_slo_s * 1e3]
    options = meets if len(meets) else fits.sort_values("batch").drop_duplicates(["dies", "tp"])
    chunks = shapes.CHUNK_TOKENS if len(meets) else shapes.CHUNK_TOKENS[:1]
    return [{**{k: (int(v) if k != "batch" else float(v)) for k, v in r.items()}, "chunk_tokens": float(c), **common}
            for r in options[keys].drop_duplicates().to_dict(orient="records") for c in chunks]


def _colocated(colo: pd.DataFrame, workload: Workload, budget_dies: int, dpp: int) -> pd.DataFrame:
    """Co-located instances (chunked prefill): each iteration is one forward pass carrying the
    decode batch and ``chunk_tokens`` prompt tokens per NPU (docs/model.md §9.4). A prompt runs
    on one die at the die's share of the chunk per iteration, whole (a co-located instance
    computes its prompts: the EMS prefix read is the prefill instances'). Each option is one
    row, at the count that ranks first among its counts (:func:`_colocated_counts`)."""
    slo = workload.slo
    rows = colo[colo["fits"]] if len(colo) else colo
    if len(rows) and (rows["tpot_ms"] <= slo.tpot_s * 1e3).any():  # the others serve nothing
        rows = rows[rows["tpot_ms"] <= slo.tpot_s * 1e3]
    rows = rows.reset_index(drop=True)
    if len(rows) == 0:
        return _empty()
    prompt = workload.prompt
    dies = rows["dies"].to_numpy(dtype=float)
    npus_i = dies / dpp
    it_s = rows["iteration_ms"].to_numpy(dtype=float) / 1e3
    tpot = rows["tpot_ms"].to_numpy(dtype=float) / 1e3
    chunk_tok = rows["chunk_tokens"].to_numpy(dtype=float)
    # a prompt runs on one die: chunk / dpp of its tokens per iteration
    per_die = chunk_tok / dpp / prompt.mean  # prompts per die per iteration
    servers_i = np.where(per_die >= 1, dies * np.floor(per_die), dies)
    service = np.where(per_die >= 1, it_s, np.ceil(1.0 / np.maximum(per_die, 1e-12)) * it_s)
    batch = rows["batch"].to_numpy(dtype=float)
    cap_d = batch * npus_i / (workload.output.mean * tpot)
    fit = np.flatnonzero(np.floor(budget_dies / dies) >= 1)
    if len(fit) == 0:
        return _empty()

    def sides(j, n):  # (prefill, decode) rates of options j at n instances each
        servers, serve, period = servers_i[j] * n, service[j], it_s[j]
        rate_p = largest_rate(lambda r, k: ttft_terms(r, servers[k], serve[k], prompt.scv, period[k], serve[k],
                                                      slo.ttft_stat)["ttft_s"] - slo.ttft_s, servers / serve)
        return rate_p, np.where(tpot[j] <= slo.tpot_s, cap_d[j] * n, 0.0)

    idx = fit
    n = _colocated_counts(np.floor(budget_dies / dies[idx]), workload.arrival_rate_per_s, lambda n: sides(idx, n))
    rate_p, rate_d = sides(idx, n)
    servers = servers_i[idx] * n
    ttft = lambda rate: ttft_terms(rate, servers, service[idx], prompt.scv, it_s[idx], service[idx], slo.ttft_stat)  # noqa: E731
    rate, binding = _operating(rate_p, rate_d, workload.arrival_rate_per_s, DECODE_TPOT)
    # the requests in decode at that rate (Little's law, at the iteration of this batch and chunk)
    in_batch = rate / n * workload.output.mean * tpot[idx] / npus_i[idx]
    queue = {"_servers": servers, "_service_s": service[idx], "_period_s": it_s[idx], "_fixed_s": service[idx],
             "_decode_curve": np.full(len(idx), -1), "_tpot_pass_s": tpot[idx]}
    tp = rows["tp"].to_numpy(dtype=float)[idx]
    return _frame("colocated", workload, rate, binding, n_p=n, p_dies=dies[idx], tokens_per_npu=chunk_tok[idx],
                  n_d=n, d_dies=dies[idx], batch=in_batch, tpot=tpot[idx], t=ttft(rate),
                  pass_s=service[idx], kv_s=np.zeros(len(idx)), dpp=dpp, rate_p=rate_p, rate_d=rate_d,
                  queue=queue, split={"decode_tp": tp}, colocated=True)


def _colocated_counts(n_max, given, sides) -> np.ndarray:
    """The instance count each co-located option is evaluated at: both its sides grow with
    the count (more servers, more decode slots), so with no rate given the most that fit
    (``n_max``) serve the most, and with a rate the fewest of its count ladder
    (:func:`instance_counts`) whose capacity ``min(*sides(n))`` carries it (``n_max``
    when none does) — the row that ranks first among the option's counts, found by halving
    the ladder (a dozen evaluations, not one per count)."""
    if given is None:
        return n_max
    ladders = [instance_counts(int(x)).astype(float) for x in n_max]
    start = np.cumsum([0] + [len(x) for x in ladders[:-1]])
    flat = np.concatenate(ladders)
    lo, hi = np.zeros(len(n_max), dtype=int), np.array([len(x) - 1 for x in ladders])
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        carried = np.minimum(*sides(flat[start + mid])) >= given
        lo, hi = np.where(carried | (lo >= hi), lo, mid + 1), np.where(carried & (lo < hi), mid, hi)
    return flat[start + lo]


# What binds a deployment, in the words a capacity planner uses.
PREFILL_TTFT = "prefill capacity (the TTFT SLO)"
PREFILL_POOL = "prefill capacity (the pool's read path: cached KV loads take most of a pass)"
DECODE_TPOT = "decode (the TPOT SLO)"
DECODE_MEMORY = "decode KV memory"
ARRIVAL = "arrival rate"


def _operating(rate_p, rate_d, given, decode_limit, prefill_limit=PREFILL_TTFT) -> tuple[np.ndarray, np.ndarray]:
    """The rate a deployment runs at — the most both sides sustain within the SLOs, or the
    given arrival rate when both sustain it — and the term that binds it (``decode_limit``:
    what stops the decode side)."""
    capacity = np.minimum(rate_p, rate_d)
    binding = np.where(rate_p <= rate_d, prefill_limit, decode_limit)
    if given is None:
        return capacity, binding
    return np.minimum(capacity, given), np.where(capacity >= given, ARRIVAL, binding)


def _frame(shape, workload, rate, binding, *, n_p, p_dies, tokens_per_npu, n_d, d_dies, batch, tpot, t,
           pass_s, kv_s, dpp, rate_p, rate_d, queue, split, colocated=False) -> pd.DataFrame:
    """One row per deployment: its split, goodput and where the time goes; the ``_`` columns
    keep the queue's parameters so curves against the rate can be redrawn (:func:`curves`)."""
    npus = (n_p * p_dies + (0 if colocated else n_d * d_dies)) / dpp
    out_tok = rate * workload.output.mean
    return pd.DataFrame({
        "shape": shape,
        "prefill_instances": n_p if not colocated else 0, "prefill_dies": p_dies if not colocated else 0,
        "prefill_tokens_per_npu": tokens_per_npu,
        "decode_instances": n_d, "decode_dies": d_dies, "decode_batch_per_npu": batch,
        "prefill_tp": split.get("prefill_tp", 0.0) if not colocated else 0.0, "decode_tp": split.get("decode_tp", 1.0),
        "attention_dies": split.get("attention_dies", 0.0), "expert_dies": split.get("expert_dies", 0.0),
        "npus": npus, "prefill_npus": 0 if colocated else n_p * p_dies / dpp,
        "decode_npus": n_d * d_dies / dpp,
        "goodput_rps": rate, "goodput_rpm": rate * 60.0, "rate_rps": rate,  # served within the SLOs = the rate run at
        "max_rps": np.minimum(rate_p, rate_d),
        "prefill_max_rps": rate_p, "decode_max_rps": rate_d, "binding": binding,
        "ttft_ms": t["ttft_s"] * 1e3, "ttft_queue_ms": t["queue_s"] * 1e3, "ttft_align_ms": t["align_s"] * 1e3,
        "ttft_prefill_ms": pass_s * 1e3, "ttft_kv_transfer_ms": kv_s * 1e3, "ttft_decode_join_ms": t["join_s"] * 1e3,
        "tpot_ms": tpot * 1e3, "tokens_per_s_per_user": 1.0 / tpot,
        "output_tokens_per_s_per_npu": out_tok / npus,
        "prompt_tokens_per_s_per_npu": rate * workload.prompt.mean / npus,
        **queue,
    })


def _rank(table: pd.DataFrame, workload: Workload) -> pd.DataFrame:
    """Highest goodput first; then fewest NPUs; then lowest TTFT."""
    if len(table) == 0:
        return table
    order = np.lexsort((table["ttft_ms"].to_numpy(), table["npus"].to_numpy(), -table["goodput_rps"].to_numpy()))
    out = table.iloc[order].reset_index(drop=True)
    out.insert(0, "rank", np.arange(1, len(out) + 1))
    return out


def _message(p: Plan) -> str:
    """Why the plan fails, naming the closest deployment and the binding term; '' when fine."""
    t = p.table
    given = p.workload.arrival_rate_per_s
    slo = p.workload.slo
    if len(t) == 0:
        why = []
        for name in ("prefill", "decode"):
            table = p.instances.get(name)
            if table is None or len(table) == 0:
                why.append(f"no valid {name} instance size within the budget and the scale-up domain")
            elif not table["fits"].any():
                why.append(f"no {name} option fits in HBM at these lengths (see `cmperf predict {name}`)")
        return f"no deployment of {p.settings['npus']} NPUs of {p.settings['hardware']}: " + "; ".join(why or ["no option"])
    best = t.iloc[0]
    if best["goodput_rps"] <= 0:
        return (f"no deployment meets {slo.text()} "
                f"at any rate; closest: {describe(best)} (binding: {best['binding']}, TTFT {best['ttft_ms']:.0f} ms, "
                f"TPOT {best['tpot_ms']:.1f} ms at the lightest load)")
    if given is not None and best["goodput_rps"] < given:
        return (f"at most {best['goodput_rps']:.2f} requests/s meet the SLOs with {p.settings['npus']} NPUs "
                f"(asked: {given:g}); best: {describe(best)} (binding: {best['binding']})")
    return ""


def describe(row) -> str:
    def tp(key):
        t = row.get(key, 1.0)
        return f" (TP {int(t)})" if t and t > 1 else ""

    if row["shape"] == "colocated":
        return (f"{int(row['decode_instances'])} co-located instance(s) of {int(row['decode_dies'])} dies{tp('decode_tp')}, "
                f"chunk {row['prefill_tokens_per_npu']:g} tokens/NPU")
    if row["shape"] == "afd":
        return (f"{int(row['prefill_instances'])} prefill x {int(row['prefill_dies'])} dies{tp('prefill_tp')} + "
                f"{int(row['decode_instances'])} AFD decode x ({int(row['attention_dies'])} attention + "
                f"{int(row['expert_dies'])} expert dies)")
    return (f"{int(row['prefill_instances'])} prefill x {int(row['prefill_dies'])} dies{tp('prefill_tp')} + "
            f"{int(row['decode_instances'])} decode x {int(row['decode_dies'])} dies{tp('decode_tp')}")


# --------------------------------------------------------------------------- reporting
def public(table: pd.DataFrame) -> pd.DataFrame:
    """The table without the queue parameters kept for curves (``_`` columns)."""
    return table[[c for c in table.columns if not str(c).startswith("_")]]


def summary(p: Plan) -> dict:
    """What ``cmperf plan`` prints: a headline, the best deployment with its split, the
    bring-up of one more instance and the context cache; plain data (JSON-ready)."""
    from .bringup import bring_up_table

    w, st = p.workload, p.settings
    hw, m = p.specs.views()
    rate = "the largest rate that meets the SLOs" if w.arrival_rate_per_s is None else f"{w.arrival_rate_per_s:g} requests/s"
    systems = st["npus"] / st["supernode_npus"]
    where = (f"one {st['supernode_npus']}-NPU system" if systems <= 1 else f"{math.ceil(systems)} systems of {st['supernode_npus']} NPUs")
    headline = (f"plan: {st['npus']} NPUs of {st['hardware']} ({where}), {st['model']}; prompts {w.prompt.text}, outputs "
                f"{w.output.text} tokens, prefix hit {w.cached_tokens / w.prompt.mean:.0%} of prompt tokens; {w.slo.text()}"
                + ("" if w.slo.tpot_stat == "mean" else " (the closed form's TPOT is the step's at the operating batch, for "
                   "every statistic; --verify simulates its spread)") + f"; at {rate}; KV transfer over {st['kv_tier']}")
    best = None
    bring_up: list = []
    cache: dict = {}
    if p.best is not None:
        b = {k: v for k, v in p.best.items() if not str(k).startswith("_")}
        b["split"] = describe(b)
        b["npus_split"] = f"{b['npus']:g} ({b['prefill_npus']:g} : {b['decode_npus']:g})"
        best = {k: (v.item() if hasattr(v, "item") else v) for k, v in b.items()}
        if hw.system.memory_pool is not None:
            bring_up = bring_up_table(hw, m, p.best, p.instances).to_dict(orient="records")
    if w.prefix_hit > 0 or st.get("pool_tokens"):
        cache = {"prefix hit asked": st.get("prefix_hit_asked", w.prefix_hit), "prefix hit served": st["prefix_hit_served"],
                 "cached tokens per request": w.cached_tokens, "computed tokens per request": w.computed.mean,
                 "pool holds (tokens)": st["pool_tokens"], "read over": st["pool_path"],
                 "share of a prefix read from the pool": st["prefix_pool_share"]}
        if st.get("hbm_cache_tokens") is not None:
            cache["HBM tier holds (tokens)"] = st["hbm_cache_tokens"]
    return {"headline": headline, "settings": st, "best": best, "bring_up": bring_up, "context_cache": cache,
            "aggregated_vs_disaggregated": aggregated_vs_disaggregated(p), "message": p.message}


def aggregated_vs_disaggregated(p: Plan) -> dict:
    """The figure planners are compared by: the best co-located (aggregated) deployment's
    goodput against the best PD (disaggregated) one's, in requests/s and per NPU, and their
    ratio (co-located / PD; None where PD serves nothing). Empty unless both shapes were
    planned."""
    if not {"pd", "colocated"} <= set(p.settings["shapes"]):
        return {}
    out = {}
    for shape in ("colocated", "pd"):
        rows = p.table[p.table["shape"] == shape] if len(p.table) else p.table
        best = rows.iloc[0] if len(rows) else None
        rps = float(best["goodput_rps"]) if best is not None else 0.0
        out[f"{shape}_goodput_rps"] = rps
        out[f"{shape}_goodput_rps_per_npu"] = rps / float(best["npus"]) if best is not None and rps > 0 else 0.0
        out[f"{shape}_deployment"] = describe(best) if best is not None and rps > 0 else "none meets the SLOs"
    ratio = lambda a, b: a / b if b > 0 else None  # noqa: E731
    out["colocated_vs_pd_goodput"] = ratio(out["colocated_goodput_rps"], out["pd_goodput_rps"])
    out["colocated_vs_pd_goodput_per_npu"] = ratio(out["colocated_goodput_rps_per_npu"], out["pd_goodput_rps_per_npu"])
    return out


def plan_sweep(workloads: list[tuple[dict, Workload]], sweeps: dict, progress=None, **kwargs) -> pd.DataFrame:
    """The best deployment for every workload variant (``(labels, workload)`` pairs: e.g. one
    per prefix-hit share or arrival rate) at every point of the cartesian product of ``sweeps``
    (spec path -> values, each applied as a ``--set``): one row per combination, the labels and
    swept values first."""
    import itertools

    from ..search import set_text

    keys = list(sweeps)
    points = list(itertools.product(*(sweeps[k] for k in keys)))
    sets = list(kwargs.pop("sets", None) or [])
    rows = []
    total = len(points) * len(workloads)
    for n, (values, (labels, workload)) in enumerate(itertools.product(points, workloads), start=1):
        p = plan(workload, sets=sets + [set_text(k, v) for k, v in zip(keys, values)], **kwargs)
        best = public(p.table).iloc[0].to_dict() if len(p.table) else {"goodput_rps": 0.0}
        rows.append({**labels, **dict(zip(keys, values)), **best})
        if progress:
            progress(n, total)
    return pd.DataFrame(rows)
