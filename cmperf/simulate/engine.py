"""The request-level simulation of one deployment (docs/model.md §12): requests, prefill
instances with batched passes, KV transfers, decode instances with data-parallel attention
ranks and continuous batching, driven by event times.

Events (one global clock, a heap):

    send        a request reaches the deployment (the client's arrival process, or a free
                slot of a closed loop at a maximum concurrency); the stack's router puts its
                prompt in one prefill instance's queue or the shared one (Router)
    pass end    a prefill instance finishes a pass: each prompt's KV then leaves over the
                instance's link, one after another (the tier is shared by its transfers);
                the instance starts its next pass from its queue (FCFS, within the stack's
                token and request budgets)
    boundary    a decode instance reaches the end of a step at which a request completes or
                a request whose KV has arrived can be admitted

Between two boundaries a decode instance's batch is fixed, so its step time follows the KV in
closed form: every request gains mu tokens per step (mu = the mean tokens an MTP step emits),
each rank's KV sum S_r(s) = A_r + n_r mu s grows linearly in the step s, and a step runs at
the hot rank's load:

    T(s) = T_d(b, L_hot(s)),   b = n / NPUs,   L_hot(s) = max_r S_r(s) / (n / R)

(every die waits at the MoE barrier for the die with the most KV to read: the spread of KV
lengths across the R ranks costs time; with equal ranks L_hot is the mean). T is linear in s
between grid points, so k steps take k T(s0) + d k (k - 1) / 2 (d the growth per step), and
the simulation jumps from boundary to boundary instead of stepping token by token. A request
needs N steps for its O - 1 decode tokens (the first comes from prefill); N is drawn at
admission from the renewal law of the MTP tokens per step (mean M / mu, variance M sigma^2 /
mu^3, clipped to [M / (k + 1), M]), so acceptance varies per request as it does per step.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..cost.pool import pass_with_pool_s
from .predictor import DecodePredictor, PrefillPredictor, pass_tokens_per_npu, pool_traffic_s


TRIED_ALONE = 4  # ranks a round robin tries one by one before testing every rank at once (_rank_for)
_max, _min, _sum = np.maximum.reduce, np.minimum.reduce, np.add.reduce  # ndarray.max / min / sum without their wrapper


def _steps_s(k: int, T0: float, d: float) -> float:
    """The time of k steps from a step of T0 growing by d a step: k T0 + d k (k - 1) / 2."""
    return k * T0 + d * k * (k - 1) / 2.0


def mtp_tokens_per_step(k: int, a: float) -> tuple[float, float]:
    """(mean, variance) of the tokens a request emits per step with k draft tokens each
    accepted with probability a, a draft kept only if all before it were: P(1 + j) = a^j (1 - a)
    for j < k, P(1 + k) = a^k."""
    if k <= 0:
        return 1.0, 0.0
    js = np.arange(k + 1)
    p = np.where(js < k, a ** js * (1 - a), a ** k)
    x = 1.0 + js
    mean = float((p * x).sum())
    return mean, float((p * x * x).sum() - mean * mean)


@dataclass
class Requests:
    """One entry per request (arrays); filled as the simulation runs."""

    arrival_s: np.ndarray  # when the client may send it
    prompt: np.ndarray
    output: np.ndarray
    cached: np.ndarray
    steps: np.ndarray  # decode steps it needs (drawn)
    send_s: np.ndarray = None
    prefill_start_s: np.ndarray = None
    prefill_end_s: np.ndarray = None
    kv_arrive_s: np.ndarray = None
    first_token_s: np.ndarray = None
    finish_s: np.ndarray = None
    pool_B: np.ndarray = None  # bytes of its cached prefix's KV in the pool (all layers)
    blocks: np.ndarray = None  # the pool blocks they fill
    kv_B: np.ndarray = None  # bytes of its whole prompt's KV (sent to decode)
    write_B: np.ndarray = None  # bytes of its new whole blocks written back to the pool
    write_blocks: np.ndarray = None  # those blocks
    _lists: object = field(default=None, repr=False, compare=False)

    INPUTS = ("arrival_s", "prompt", "output", "cached", "steps", "pool_B", "blocks", "kv_B", "write_B", "write_blocks")

    def lists(self):
        """The inputs above (arrival to write_blocks) as Python lists, made once, for the
        engine's per-request code: an item of a list is a Python number, of an array a numpy
        scalar, slower to make and to compute with (the same values, the same IEEE arithmetic).
        Inputs are not changed once the simulation runs."""
        if self._lists is None:
            from types import SimpleNamespace

            self._lists = SimpleNamespace(**{k: np.asarray(getattr(self, k)).tolist() for k in self.INPUTS})
        return self._lists

    def __post_init__(self):
        n = len(self.prompt)
        for name in ("pool_B", "blocks", "kv_B", "write_B", "write_blocks"):
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(n))
        for name in ("send_s", "prefill_start_s", "prefill_end_s", "kv_arrive_s", "first_token_s", "finish_s"):
            if getattr(self, name) is None:
                setattr(self, name, np.full(n, np.nan))


@dataclass
class Stats:
    """What the instances record while they run (for utilisation, ITL and queues)."""

    prefill_busy_s: list = field(default_factory=list)
    decode_busy_s: list = field(default_factory=list)
    intervals: list = field(default_factory=list)  # (first step time, growth per step, steps, requests)
    queue: list = field(default_factory=list)  # (time, prefill queue, decode waiting, decode running)


class DecodeInstance:
    """One decode instance: R data-parallel attention ranks sharing one step (module docstring)."""

    def __init__(self, idx: int, pred: DecodePredictor, ranks: int, mu: float, cap_requests: float,
                 policy: str, req: Requests, stats: Stats):
        self.idx, self.pred, self.R, self.mu = idx, pred, ranks, mu
        self.cap_n = cap_requests
        self.cap_kv = pred.kv_tokens_per_rank
        self.policy, self.req, self.stats = policy, req, stats
        self.q = req.lists()  # the requests' inputs, read per request
        self.n_r = np.zeros(ranks)
        self.A_r = np.zeros(ranks)  # sum over the rank's requests of (prompt - mu x admission step)
        self.W_r = np.zeros(ranks)  # sum over the rank's requests of the whole context each reserves (_reserve)
        self.n = 0
        self.t, self.s = 0.0, 0.0
        self.finishing: list = []  # (finish step, request)
        self.rank_of: dict = {}
        self.admit_step: dict = {}
        self.pending: list = []  # (KV arrival time, request)
        self.waiting: deque = deque()
        self.rr = 0
        self.version = 0
        self.planned = None  # (steps, their time, first step time, growth per step) of the next boundary
        self.busy = 0.0
        self.live: dict = {}  # request -> its finish step (entries of the finishing heap that still hold)
        self.extra: dict = {}  # request -> tokens it generated before a preemption (recomputed with its prompt)
        self.steps_left: dict = {}  # request -> decode steps still to run after a preemption
        self.preemptions = 0
        self.reserved: dict = {}  # request -> the KV tokens it reserves on its rank (_reserve)
        self.peak_kv = 0.0  # the most KV tokens any rank held (at a boundary, before its completions)
        self.reserve_output = True  # admission reserves a request's whole context (else its prompt: preemption)
        self._growth = None  # n_r mu, each rank's KV growth per step (_kv_at)
        self._kv: dict = {}  # step -> S_r at that step, of the last few steps asked for (_kv_at)
        self._plan_at = None  # ((step, span), (T0, d, T_mean)) of the batch as it is (_step_times)

    # -- load (the hot path: a numpy call costs ~1 µs whatever the ranks, so a rank array is made
    # once and then kept up to date rank by rank, and reduced by the ufuncs' own reduce, without
    # ndarray.max's wrapper; a boundary planned again for a new KV arrival reuses its step times) --
    def _move(self, r: int, dn: int, dA: float) -> None:
        """A request joins (dn = 1) or leaves (dn = -1) rank ``r``, its A_r changing by ``dA``:
        the rank arrays kept are made anew at ``r`` (as the whole array makes it), the step
        times dropped. In Python floats: the same IEEE arithmetic, without numpy scalars."""
        self.n_r[r] = n = self.n_r.item(r) + dn
        self.A_r[r] = a = self.A_r.item(r) + dA
        self._plan_at = None
        if self._growth is not None:
            g = self._growth[r] = n * self.mu
            for s, kv in self._kv.items():
                kv[r] = a + g * s

    def _kv_at(self, s: float) -> np.ndarray:
        """Each rank's KV tokens at step ``s``, S_r(s) = A_r + n_r mu s (module docstring)."""
        kv = self._kv.get(s)
        if kv is None:
            if self._growth is None:
                self._growth = self.n_r * self.mu
            if len(self._kv) > 1:  # a boundary reads its own step and its plan's end (the next boundary's own)
                del self._kv[next(iter(self._kv))]
            kv = self._kv[s] = self.A_r + self._growth * s
        return kv

    def _step_s(self, s: float) -> float:
        """The step time at step ``s``, T(s) = T_d(b, L_hot(s)) (module docstring)."""
        if self.n == 0:
            return 0.0
        hot = float(_max(self._kv_at(s)))
        return self.pred.step(self.n / self.pred.npus, hot / (self.n / self.R))

    def _mean_step_s(self) -> float:
        """The step time now were every rank's KV the mean (the step without the DP ranks' spread)."""
        return self.pred.step(self.n / self.pred.npus, float(_sum(self._kv_at(self.s))) / self.n)

    def _step_times(self, span: float) -> tuple[float, float, float]:
        """(T0, d, T_mean) from the step now over ``span`` steps: the first step's time, its
        growth per step and the first step's time at the mean KV (module docstring)."""
        key = (self.s, span)
        if self._plan_at is not None and self._plan_at[0] == key:
            return self._plan_at[1]
        T0 = self._step_s(self.s)
        d = (self._step_s(self.s + span) - T0) / span if span > 1 else 0.0
        times = T0, d, self._mean_step_s()
        self._plan_at = key, times
        return times

    def _steps_until(self, k_max: float, t_goal: float | None) -> tuple[int, float, float, float, float]:
        """(k, time of k steps, T0, d, T_mean) for the first boundary at or after ``t_goal`` (or k_max)."""
        span = max(k_max, 1.0)
        T0, d, T_mean = self._step_times(span)
        k = int(k_max)
        if t_goal is not None and _steps_s(k, T0, d) > t_goal - self.t:
            dt = t_goal - self.t
            if d > 1e-15:
                kk = (-(T0 - d / 2) + math.sqrt((T0 - d / 2) ** 2 + 2 * d * dt)) / d
            else:
                kk = dt / T0 if T0 > 0 else 0.0
            k = max(1, min(k, math.ceil(kk - 1e-9)))
        return k, _steps_s(k, T0, d), T0, d, T_mean

    def next_event(self) -> float | None:
        """Plan the next boundary (stored: steps and their time); None when idle with nothing pending."""
        self.version += 1
        if self.n == 0:
            if self.waiting:
                return self.t
            if self.pending:
                return self.pending[0][0]
            return None
        self._drop_stale()
        k_c = min(max(self.finishing[0][0] - self.s, 1.0), self._forced_steps())
        t_goal = None
        if self.pending and self._room():
            t_goal = self.pending[0][0]
        self.planned = self._steps_until(math.ceil(k_c - 1e-9), t_goal)
        return self.t + self.planned[1]

    def _room(self) -> bool:
        """A rank has fewer requests than it may run."""
        return bool(_min(self._load_n()) < self.cap_n)

    def _forced_steps(self) -> float:
        """Steps until a boundary the instance must stop at (none here: admission reserves
        each request's whole context, so no rank's KV outgrows what it holds)."""
        return math.inf

    def _drop_stale(self) -> None:
        """Finishing entries of requests no longer in the batch (preempted) leave the heap's top."""
        while self.finishing and self.live.get(self.finishing[0][1]) != self.finishing[0][0]:
            heapq.heappop(self.finishing)

    def add_pending(self, t: float, rid: int) -> None:
        heapq.heappush(self.pending, (t, rid))

    # -- the boundary ---------------------------------------------------------
    def advance(self, now: float) -> list:
        """Run the planned steps to ``now`` (a boundary), then complete and admit; returns the
        requests completed at this boundary."""
        done = []
        if self.n > 0:
            k, dt, T0, d, T_mean = self.planned
            self.stats.intervals.append((T0, d, k, self.n, T_mean))
            self.busy += dt
            self.s += k
            self.peak_kv = max(self.peak_kv, float(_max(self._load_kv())))
        self.t = now
        self._complete(now, done)
        while self.pending and self.pending[0][0] <= now + 1e-12:
            self.waiting.append(heapq.heappop(self.pending)[1])
        self._admit(now, done)
        return done

    def _complete(self, now: float, done: list) -> None:
        """The requests whose last step has run leave the batch."""
        req, finishing, live, end = self.req, self.finishing, self.live, self.s + 1e-9
        while finishing and finishing[0][0] <= end:
            step, rid = heapq.heappop(finishing)
            if live.get(rid) != step:
                continue
            del live[rid]
            r = self.rank_of.pop(rid)
            self._move(r, -1, -(self.q.prompt[rid] + self.extra.pop(rid, 0.0) - self.mu * self.admit_step.pop(rid)))
            self._release(rid, r)
            self.n -= 1
            req.finish_s[rid] = now
            done.append(rid)

    def _release(self, rid: int, r: int) -> None:
        """Request ``rid``, leaving rank ``r`` (already counted out of n_r), frees its reservation
        (an emptied rank holds none: no rounding left over)."""
        w = self.reserved.pop(rid)
        self.W_r[r] = self.W_r.item(r) - w if self.n_r.item(r) > 0 else 0.0

    def _join(self, rid: int, r: int, now: float, done: list) -> None:
        """Request ``rid`` joins the batch on rank ``r`` (its first token reaches the client now)."""
        req = self.req
        if math.isnan(req.first_token_s[rid]):  # a recomputed request streamed its first token before
            req.first_token_s[rid] = now
        steps = self.steps_left.pop(rid, self.q.steps[rid])
        if steps <= 0:
            req.finish_s[rid] = now
            done.append(rid)
            return
        self._move(r, 1, self.q.prompt[rid] + self.extra.get(rid, 0.0) - self.mu * self.s)
        self.reserved[rid] = w = self._reserve(rid, steps)
        self.W_r[r] = self.W_r.item(r) + w
        self.n += 1
        self.rank_of[rid] = r
        self.admit_step[rid] = self.s
        self.live[rid] = self.s + steps
        heapq.heappush(self.finishing, (self.s + steps, rid))

    def _admit(self, now: float, done: list) -> None:
        """Admit waiting requests (their KV has arrived) to ranks with room, FCFS."""
        while self.waiting:
            rid = self.waiting[0]
            r = self._rank_for(rid)
            if r is None:
                break
            self.waiting.popleft()
            self._join(rid, r, now, done)

    def _load_n(self) -> np.ndarray:
        """Requests of each rank now."""
        return self.n_r

    def _load_kv(self) -> np.ndarray:
        """KV tokens of each rank now."""
        return self._kv_at(self.s)

    def _reserve(self, rid: int, steps: float) -> float:
        """The KV tokens request ``rid`` holds at its end, reserved on its rank while it runs:
        its whole context, prompt + output (+ the tokens it generated before a preemption), or
        the KV its ``steps`` reach at mu tokens a step when more (a drawn step count above the
        mean): no request outgrows its reservation."""
        base = self.q.prompt[rid] + self.extra.get(rid, 0.0)
        return base + max(self.q.output[rid], self.mu * steps)

    def _rank_for(self, rid: int) -> int | None:
        """The rank a new request goes to (round robin or least KV), among ranks with room for
        it; None when none has; an empty rank takes any request. Room: with ``reserve_output``
        (a PD decode instance, SGLang's disaggregated decode) the whole contexts the rank's
        requests reserve plus the new one's, W_r + reserve <= the rank's KV tokens, so the
        running requests' growth is held for them and the rank never over-fills; otherwise (a
        co-located instance, vLLM's on-demand blocks) the rank's KV now plus the new prompt's
        and one step's, the rank preempting when it outgrows (CoLocatedInstance._preempt)."""
        n_r = self._load_n()
        kv = self._load_kv() if self.policy == "least_kv" or not self.reserve_output else None
        if self.reserve_output:
            used, need = self.W_r, self._reserve(rid, self.steps_left.get(rid, self.q.steps[rid]))
        else:
            used, need = kv, self.q.prompt[rid] + self.extra.get(rid, 0.0) + self.mu
        tried = 0
        if self.policy == "least_kv":  # the rank with the least KV alone first: with room, the answer
            r = int(kv.argmin())
            if self._fits(n_r.item(r), used.item(r), need):
                return r
        else:  # round robin: the next ranks in turn one by one (the usual answer)
            tried = min(self.R, TRIED_ALONE)
            for j in range(tried):
                r = (self.rr + j) % self.R
                if self._fits(n_r.item(r), used.item(r), need):
                    self.rr = r + 1
                    return r
        ok = self._fits(n_r, used, need)  # then every rank at once
        if not ok.any():
            return None
        if self.policy == "least_kv":
            return int(np.where(ok, kv, np.inf).argmin())
        for j in range(tried, self.R):
            r = (self.rr + j) % self.R
            if ok[r]:
                self.rr = r + 1
                return r
        return None

    def _fits(self, n, used, need):
        """Room on ranks (or one rank) holding ``n`` requests and ``used`` KV tokens for a
        request needing ``need`` more (_rank_for): fewer requests than the cap and the KV
        within the rank, or an empty rank."""
        return (n < self.cap_n) & ((used + need <= self.cap_kv) | (n == 0))


class CoLocatedInstance(DecodeInstance):
    """A decode instance that also prefills its own requests (aggregated serving), Sarathi-style:
    every iteration is one forward pass carrying the decode batch and a chunk of prompt tokens
    (docs/model.md §12.3). The chunk is filled first from the prompts already in flight (their
    next pieces, FCFS), then from the waiting prompts, each given a rank with room for its
    prompt (a rank that outgrows its KV preempts: _preempt); with the stack's chunked prefill on (``chunked``) a prompt is split over
    iterations at the budget, otherwise whole prompts go in (the first one even when alone it
    exceeds the budget). The iteration's time is the one cost model's mixed pass
    T_c(b, L_hot, c) at the decode batch b per NPU, the hot rank's KV and c chunk tokens per NPU;
    each such iteration is also one decode step. A prompt's first token comes at the end of the
    iteration that ran its last piece; its KV stays on the instance (no transfer). With no
    prompt to prefill the instance jumps from boundary to boundary as a decode instance.

    Each DP-attention rank schedules its own prompts (SGLang's scheduler per DP rank, vLLM's
    engine per DP rank): a rank takes at most ``budget_tokens / ranks`` prompt tokens an
    iteration (the stack's per-rank --max-prefill-tokens, or chunk), its first prompt whatever
    its length, and the iteration is timed at its most-loaded rank's tokens
    (:func:`cmperf.simulate.predictor.pass_tokens_per_npu`): a rank computes its prompts'
    attention and dense layers on its own dies. With ``delay_passes`` (SGLang's prefill delayer,
    ``--enable-prefill-delayer`` / ``SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE=1``; docs/model.md
    §12.3) new prompts wait until every rank can prefill at once, or ``delay_passes - 1``
    forward passes: :meth:`_held_back`."""

    def __init__(self, idx, pred, ranks, mu, cap_requests, policy, req, stats, budget_tokens: float,
                 budget_requests: float, chunked: bool, delay_passes: int = 0, extend_pauses: bool = False,
                 decode_budget_tokens: float = 0.0):
        super().__init__(idx, pred, ranks, mu, cap_requests, policy, req, stats)
        self.budget_tokens, self.budget_requests, self.chunked = budget_tokens, budget_requests, chunked
        self.decode_budget_tokens = float(decode_budget_tokens)  # budget tokens a running request takes first (vLLM V1)
        self.per_rank_tokens = budget_tokens / ranks  # a rank's own prefill budget per iteration
        self.delay_passes = int(delay_passes)
        self.extend_pauses = bool(extend_pauses)  # a rank that extends does not step its decode batch (mixed_chunks off)
        self.delay_from = None  # the step the delayer began holding new prompts back at
        self.recent_bs: deque = deque(maxlen=16)  # largest prompts per rank of the latest iterations with new prompts
        self.first_slot_delay = True  # the delayer lets its first slot-limited wait pass (SGLang's skip_first_delayer)
        self._shut = np.zeros(ranks)  # while composing a chunk: inf on ranks whose own budget is spent
        self.filling: list = []  # [request, rank, prompt tokens still to compute], FCFS
        self.held_n = np.zeros(ranks)  # ranks reserved by the prompts being filled
        self.held_kv = np.zeros(ranks)
        self.iteration = None  # (end time, time, time at the mean KV, [(filling entry, tokens)])
        self.prefill_busy = 0.0
        self.reserve_output = False  # admits on its prompt's KV; preempts when a rank's KV outgrows it

    def next_event(self) -> float | None:
        if self.iteration is not None:
            self.version += 1
            return self.iteration[0]
        return super().next_event()

    def _load_n(self) -> np.ndarray:
        return self.n_r + self.held_n + self._shut

    def _load_kv(self) -> np.ndarray:
        return self._kv_at(self.s) + self.held_kv

    def _admit(self, now: float, done: list) -> None:
        """After a decode-only boundary: preempt where KV outgrew a rank, then the prompts that
        wait start an iteration."""
        self._preempt()
        self._start_iteration(now)

    def _forced_steps(self) -> float:
        """Steps until the first rank's KV (its requests' growing KV and its prompts being
        filled) outgrows what the rank holds, S_r(s) = A_r + n_r mu s + held_r, or until the
        prefill delayer stops holding prompts back, whichever comes first."""
        busy = self.n_r > 0
        if not busy.any():
            return math.inf
        room = self.cap_kv - self.A_r[busy] - self.held_kv[busy]
        s_full = room / (self.n_r[busy] * self.mu) - self.s
        k = float(max(math.ceil(float(s_full.min())), 1.0))
        if self.delay_from is not None and self.waiting:
            k = min(k, max(self.delay_from + self.delay_passes - 1 - self.s, 1.0))
        return k

    def _pause(self, ranks: set) -> None:
        """The running requests of ``ranks``, which ran an extend forward in the iteration just
        ended (their rank's batch was its prompts: SGLang without --enable-mixed-chunk), did not
        step: each is one step later from here on (its admit step and its last step moved on by
        one, its rank's KV one step's tokens less)."""
        for rid, r in self.rank_of.items():
            if r in ranks:
                self.admit_step[rid] += 1
                self.live[rid] += 1
                heapq.heappush(self.finishing, (self.live[rid], rid))
                self._move(r, 0, -self.mu)

    def _held_back(self) -> bool:
        """SGLang's prefill delayer (sglang/srt/managers/prefill_delayer.py): the ranks gather
        which of them can prefill. None can: nothing is held. Every rank can (here: every rank
        has room and at least one waiting prompt each, as the DP controller's round robin gives
        them) and each has as many free slots as its largest recent prefill batch: prefill now.
        Otherwise (some ranks only, or a rank too full to take a whole batch) new prompts wait,
        at most ``delay_passes - 1`` forward passes, then go. A release starts the count anew.
        An idle instance (no decode batch: no forward passes to count) holds nothing back."""
        if self.delay_passes <= 0 or self.R == 1 or not self.waiting or self.n == 0:
            self.delay_from = None
            return False
        free = self.cap_n - self._load_n()
        if not (free >= 1).any():
            self.delay_from = None
            return False
        if (free >= 1).all() and len(self.waiting) >= self.R:
            if float(free.min()) >= max(self.recent_bs, default=0):
                self.delay_from = None
                return False
            if self.first_slot_delay:
                self.first_slot_delay = False
                self.delay_from = None
                return False
        if self.delay_from is None:
            self.delay_from = self.s
        if self.s - self.delay_from < self.delay_passes - 1:
            return True
        self.delay_from = None
        return False

    def _preempt(self) -> None:
        """vLLM's recompute preemption: while a rank's KV exceeds what it holds, its newest request
        (the latest admitted) leaves the batch, its KV dropped; it waits at the head of the queue
        to recompute its prompt and the tokens it had generated, then resumes its remaining steps."""
        while True:
            over = np.flatnonzero((self._load_kv() > self.cap_kv + 1e-6) & (self.n_r > 1))
            if not len(over):
                return
            r = int(over[0])
            rid = max((x for x, rr in self.rank_of.items() if rr == r), key=lambda x: (self.admit_step[x], x))
            done_steps = self.s - self.admit_step[rid]
            left = self.live.pop(rid) - self.s
            self.rank_of.pop(rid)
            self._move(r, -1, -(self.q.prompt[rid] + self.extra.get(rid, 0.0) - self.mu * self.admit_step.pop(rid)))
            self._release(rid, r)
            self.n -= 1
            self.extra[rid] = self.extra.get(rid, 0.0) + self.mu * done_steps
            self.steps_left[rid] = left
            self.waiting.appendleft(rid)
            self.preemptions += 1

    def advance(self, now: float) -> list:
        if self.iteration is None:
            return super().advance(now)
        _, T, T_mean, chunk = self.iteration
        self.iteration = None
        done: list = []
        if self.n > 0:
            self.stats.intervals.append((T, 0.0, 1, self.n, T_mean))
            self.s += 1
            if self.extend_pauses:
                self._pause({e[1] for e, _ in chunk})
        self.busy += T
        self.prefill_busy += T
        self.t = now
        self._complete(now, done)
        self._preempt()
        req = self.req
        for e, tok in chunk:
            e[2] -= tok
            if e[2] <= 0:
                rid, r = e[0], e[1]
                self.held_n[r] -= 1
                self.held_kv[r] -= self.q.prompt[rid] + self.extra.get(rid, 0.0)
                req.prefill_end_s[rid] = req.kv_arrive_s[rid] = now
                self._join(rid, r, now, done)
        self.filling = [e for e in self.filling if e[2] > 0]
        while self.pending and self.pending[0][0] <= now + 1e-12:
            self.waiting.append(heapq.heappop(self.pending)[1])
        self._start_iteration(now)
        return done

    def _start_iteration(self, now: float) -> None:
        """Compose the next iteration's chunk (class docstring); none when nothing is to prefill."""
        req = self.req
        # each rank's budget for prompt tokens: its own, less what its running requests take first
        room = np.maximum(self.per_rank_tokens - self.decode_budget_tokens * self.n_r, 0.0)
        chunk = []
        taken: dict = {}  # rank -> its prompt tokens in this chunk
        count: dict = {}  # rank -> its prompts in this chunk
        new, pool_B, blocks, write_B, write_blocks = 0, 0.0, 0.0, 0.0, 0.0  # the prompts this iteration starts
        for e in self.filling:  # the prompts in flight first, each within its own rank's budget
            r = e[1]
            left = room[r] - taken.get(r, 0.0)
            take = min(e[2], left) if self.chunked else (e[2] if e[2] <= left or r not in taken else 0.0)
            if take <= 0:
                continue
            chunk.append((e, take))
            taken[r] = taken.get(r, 0.0) + take
            count[r] = count.get(r, 0) + 1
        held = self._held_back()
        while not held and self.waiting and len(self.filling) < self.budget_requests:
            rid = self.waiting[0]
            c = max(self.q.prompt[rid] - self.q.cached[rid], 1.0) + self.extra.get(rid, 0.0)  # a preempted one recomputes
            self._shut[:] = np.where(room <= 0, math.inf, 0.0)  # a rank whose decode batch takes its whole budget
            for rr, t in taken.items():  # a rank whose own budget this prompt would overrun takes no more
                self._shut[rr] = math.inf if (t >= room[rr] if self.chunked else t + c > room[rr]) else 0.0
            r = self._rank_for(rid)
            if r is None:
                break
            self.waiting.popleft()
            self.held_n[r] += 1
            self.held_kv[r] += self.q.prompt[rid] + self.extra.get(rid, 0.0)
            e = [rid, r, c]
            self.filling.append(e)
            if math.isnan(req.prefill_start_s[rid]):
                req.prefill_start_s[rid] = now
            new += 1
            pool_B += self.q.pool_B[rid]
            blocks += self.q.blocks[rid]
            write_B += self.q.write_B[rid]
            write_blocks += self.q.write_blocks[rid]
            take = min(c, room[r] - taken.get(r, 0.0)) if self.chunked else c
            chunk.append((e, take))
            taken[r] = taken.get(r, 0.0) + take
            count[r] = count.get(r, 0) + 1
        self._shut[:] = 0.0
        if not chunk:
            return
        if new:
            self.recent_bs.append(max(count.values()))
        dies_per_rank = self.pred.dies_per_rank
        tokens = pass_tokens_per_npu(sum(taken.values()), self.pred.npus, max(taken.values()), dies_per_rank,
                                     self.R * dies_per_rank / self.pred.npus)
        b = self.n / self.pred.npus
        if self.n > 0:
            kv = self._kv_at(self.s)
            hot, mean = float(_max(kv)) / (self.n / self.R), float(_sum(kv)) / self.n
        else:
            hot = mean = 16.0
        T, T_mean = self.pred.step(b, hot, tokens), self.pred.step(b, mean, tokens)
        if new and (pool_B > 0 or write_B > 0):
            # the prompts it starts read their cached prefixes from the pool before the pass and
            # write their new blocks back during it (as a prefill pass: cost/pool.pass_with_pool_s),
            # over the dies of the ranks they go to
            share = min(new, self.R) * self.pred.dies_per_rank
            read, write = pool_traffic_s(self.pred.pool_read_s, self.pred.pool_write_s, share, pool_B, blocks,
                                         write_B, write_blocks)
            T, T_mean = float(pass_with_pool_s(T, read, write)), float(pass_with_pool_s(T_mean, read, write))
        self.iteration = (now + T, T, T_mean, chunk)


class PrefillInstance:
    def __init__(self, idx: int, pred: PrefillPredictor, budget_tokens: float, budget_requests: float):
        self.idx, self.pred = idx, pred
        self.budget_tokens, self.budget_requests = budget_tokens, budget_requests
        self.queue: deque = deque()  # the prompts routed to it, FCFS (one deque shared by all under the shared queue)
        self.busy_until = 0.0
        self.link_free = 0.0
        self.batch: list = []
        self.idle = True
        self.busy = 0.0
        self.transfer_s = 0.0


ROUTERS = ("shared", "round_robin", "random", "least_load")


class Router:
    """Where a request's prompt is prefilled (the global scheduler of a PD deployment, as
    Vidur keeps it apart from the instances; docs/model.md §12.3). ``shared``: one FCFS queue
    that every prefill instance takes from when it frees (a pull model); otherwise the router
    gives each request to one instance's own queue at its arrival: ``round_robin`` in turn,
    ``random`` uniformly (seeded), ``least_load`` the instance with the fewest prompts waiting
    or in its pass (ties in turn)."""

    def __init__(self, policy: str = "shared", rng: np.random.Generator | None = None):
        if policy not in ROUTERS:
            raise ValueError(f"router {policy!r}: expected one of {', '.join(ROUTERS)}")
        self.policy = policy
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.turn = 0
        self._draws: list = []

    def route(self, prefill: list, rid: int):
        n = len(prefill)
        if self.policy == "random":
            if not self._draws:
                self._draws = self.rng.integers(0, n, 4096).tolist()[::-1]
            return prefill[self._draws.pop()]
        if self.policy == "least_load":
            best, load = None, math.inf
            for j in range(n):
                p = prefill[(self.turn + j) % n]
                w = len(p.queue) + len(p.batch)
                if w < load:
                    best, load = p, w
            self.turn = (best.idx + 1) % n
            return best
        p = prefill[self.turn % n]
        self.turn += 1
        return p


class Simulation:
    """One deployment's prefill and decode instances under a stream of requests."""

    def __init__(self, req: Requests, prefill: list[PrefillInstance], decode: list[DecodeInstance],
                 max_concurrency: float, stats: Stats, router=None):
        self.req, self.prefill, self.decode = req, prefill, decode
        self.router = router if router is not None else Router("shared")
        self.colocated = [d for d in decode if isinstance(d, CoLocatedInstance)]
        self.C = max_concurrency
        self.stats = stats
        self.heap: list = []
        self.seq = 0
        self.queue: deque = deque()  # the shared queue (router 'shared'): every prefill instance's
        if self.router.policy == "shared":
            for p in prefill:
                p.queue = self.queue
        self.in_flight = 0
        self.next_send = 0
        self.rr_decode = 0
        order = np.argsort(req.arrival_s, kind="stable")
        self.order = order
        self.q = req.lists()  # the requests' inputs, read per request
        self._order = order.tolist()

    def _push(self, t: float, kind: str, obj, version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, obj, version))

    def _plan(self, d: DecodeInstance) -> None:
        t = d.next_event()
        if t is not None:
            self._push(t, "boundary", d, d.version)

    def run(self, progress=None) -> None:
        req, order, n, arrival = self.req, self._order, len(self.req.prompt), self.q.arrival_s
        heap, queue_samples = self.heap, self.stats.queue
        now = 0.0
        tick = max(n // 100, 1)
        sent = 0
        while True:
            t_heap = heap[0][0] if heap else math.inf
            t_send = math.inf
            if self.next_send < n and self.in_flight < self.C:
                t_send = max(arrival[order[self.next_send]], now)
            if t_send == math.inf and t_heap == math.inf:
                break
            if t_send <= t_heap:
                now = t_send
                rid = order[self.next_send]
                self.next_send += 1
                self.in_flight += 1
                req.send_s[rid] = now
                if self.colocated:
                    c = self.colocated[self.rr_decode % len(self.colocated)]
                    self.rr_decode += 1
                    c.add_pending(now, rid)
                    if c.iteration is None and (c.n == 0 or c.pending[0][1] == rid):
                        self._plan(c)
                elif self.router.policy == "shared":
                    self.queue.append(rid)
                    self._start_passes(now)
                else:  # the router gives it to one instance's own queue; an idle instance starts at once
                    p = self.router.route(self.prefill, rid)
                    p.queue.append(rid)
                    if p.idle:
                        self._start_pass(p, now)
                sent += 1
                if progress and sent % tick == 0:
                    progress(sent, n)
                continue
            t, _, kind, obj, version = heapq.heappop(heap)
            now = t
            if kind == "pass_end":
                self._pass_end(obj, now)
            elif kind == "boundary" and version == obj.version:
                self.in_flight -= len(obj.advance(now))
                self._plan(obj)
            if self.seq % 50 == 0 and len(queue_samples) < 20000:
                queue_samples.append((now, self._queued(), sum(len(d.waiting) + len(d.pending) for d in self.decode),
                                         sum(d.n for d in self.decode)))
        if progress:
            progress(n, n)

    # -- prefill ------------------------------------------------------------------
    def _queued(self) -> int:
        """Prompts waiting for a prefill pass (every instance's queue)."""
        if self.router.policy == "shared":
            return len(self.queue)
        return sum(len(p.queue) for p in self.prefill)

    def _start_passes(self, now: float) -> None:
        """Every idle instance with prompts waiting starts a pass (in order: under the shared queue
        the first takes what its budgets allow, the next the rest). A prompt sent to an idle
        instance starts its pass at once, even in a burst (the scheduler of a real instance
        takes what has reached it: requests sent together reach it one after another)."""
        for p in self.prefill:
            if p.idle and p.queue:
                self._start_pass(p, now)

    def _start_pass(self, p: PrefillInstance, now: float) -> None:
        """The next pass of ``p``: FCFS from the queue within its token and request budgets
        (the first prompt whatever its length); its time from the batch's sums."""
        req, q, queue = self.req, self.q, p.queue
        batch, tokens, sq, cC, pool_B, blocks, kv_B, write_B, write_blocks = [], 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
        while queue and (not batch or (len(batch) < p.budget_requests
                                            and tokens + q.prompt[queue[0]] - q.cached[queue[0]] <= p.budget_tokens)):
            rid = queue.popleft()
            c = q.prompt[rid] - q.cached[rid]
            batch.append(rid)
            tokens += c
            sq += c * c
            cC += c * q.cached[rid]
            pool_B += q.pool_B[rid]
            blocks += q.blocks[rid]
            kv_B += q.kv_B[rid]
            write_B += q.write_B[rid]
            write_blocks += q.write_blocks[rid]
        pass_s, xfer_s = p.pred.times(tokens, sq / tokens, cC / tokens, len(batch), pool_B, blocks, kv_B,
                                      write_B, write_blocks)
        for rid in batch:
            req.prefill_start_s[rid] = now
        p.batch, p.idle = batch, False
        p.transfer_s = xfer_s
        p.busy += pass_s
        self._push(now + pass_s, "pass_end", p)

    def _pass_end(self, p: PrefillInstance, now: float) -> None:
        """Each prompt's KV leaves over the instance's link in turn (its share of the
        transfer by its bytes), then waits for its decode instance."""
        req, q = self.req, self.q
        total = sum(q.kv_B[rid] for rid in p.batch) or 1.0
        for rid in p.batch:
            req.prefill_end_s[rid] = now
            start = max(now, p.link_free)
            p.link_free = start + p.transfer_s * (q.kv_B[rid] / total if q.kv_B[rid] > 0 else 1.0 / len(p.batch))
            req.kv_arrive_s[rid] = p.link_free
            d = self._decode_for(rid)
            d.add_pending(p.link_free, rid)
            if d.n == 0 or d.pending[0][1] == rid:  # the earliest pending arrival may move its next boundary
                self._plan(d)
        p.batch, p.idle = [], True
        if p.queue:
            self._start_pass(p, now)

    def _decode_for(self, rid: int) -> DecodeInstance:
        """Decode instances take requests in turn (each balances its own DP ranks)."""
        d = self.decode[self.rr_decode % len(self.decode)]
        self.rr_decode += 1
        return d


def draw_steps(output: np.ndarray, k: int, a: float, rng: np.random.Generator) -> np.ndarray:
    """Decode steps each request needs for its output - 1 tokens (module docstring)."""
    mean, var = mtp_tokens_per_step(k, a)
    M = np.maximum(np.asarray(output, dtype=float) - 1.0, 0.0)
    z = rng.standard_normal(len(M))
    n = np.rint(M / mean + z * np.sqrt(M * var / mean ** 3))
    return np.clip(n, np.ceil(M / (k + 1)), M).astype(int)
