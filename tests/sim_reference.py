"""A slow, plain reference for ``cmperf simulate``'s engine: the same deployment stepped one
decode step at a time, every running request drawing its accepted MTP drafts per step, its KV
growing by what it emitted, every step timed from the same step-time predictor. No closed
forms, no renewal draws, no event jumps: tests compare the fast engine against it."""

from __future__ import annotations

import math
from collections import deque

import numpy as np


def reference_run(prompt, output, arrival, prefill_pred, n_prefill, budget_tokens, budget_requests,
                  decode_pred, ranks, cap_rank, k, a, rng, max_concurrency=math.inf, kv_B=None, router="shared"):
    """Returns per request (send, first token, finish) times, arrays. ``kv_B``: each prompt's
    KV bytes (its share of a pass's transfer; default in proportion to its tokens). ``router``:
    ``shared`` (one queue, idle instances take from it) or ``round_robin`` (each sent request
    to the next instance's own queue)."""
    kv_B = np.asarray(prompt, dtype=float) if kv_B is None else np.asarray(kv_B, dtype=float)
    n = len(prompt)
    send = np.full(n, np.nan)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    order = list(np.argsort(arrival, kind="stable"))
    shared: deque = deque()
    queues = [shared] * n_prefill if router == "shared" else [deque() for _ in range(n_prefill)]
    turn = 0
    pre_free = [0.0] * n_prefill  # when each prefill instance is free
    link_free = [0.0] * n_prefill
    arrivals_at_decode = []  # (time, request)
    ptr = 0
    # the closed loop couples prefill to decode completions: run both in one time-stepped loop
    running: dict = {}  # request -> (rank, emitted, kv)
    waiting: deque = deque()
    rank_n = np.zeros(ranks)
    rank_kv = np.zeros(ranks)
    rank_res = np.zeros(ranks)  # the whole contexts (prompt + output) its requests reserve
    rr = 0
    now = 0.0
    pending_passes: list = []  # (end time, instance, batch, transfer time)
    in_flight = 0
    done = 0

    def start_idle():  # idle instances take their queue (a pass within the budgets)
        for i in range(n_prefill):
            busy = any(p[1] == i for p in pending_passes)
            queue = queues[i]
            if not busy and queue:
                batch, tokens, sq = [], 0.0, 0.0
                while queue and (not batch or (len(batch) < budget_requests and tokens + prompt[queue[0]] <= budget_tokens)):
                    r = queue.popleft()
                    batch.append(r)
                    tokens += prompt[r]
                    sq += prompt[r] ** 2
                pass_s, xfer = prefill_pred.times(tokens, sq / tokens, 0.0, len(batch), 0.0, 0.0, sum(kv_B[r] for r in batch))
                pending_passes.append((now + pass_s, i, batch, xfer))

    while done < n:
        # 1. sends that are due (closed loop: while fewer than the cap are in flight)
        while ptr < n and in_flight < max_concurrency and arrival[order[ptr]] <= now + 1e-12:
            rid = order[ptr]
            ptr += 1
            send[rid] = max(arrival[rid], now)
            queues[turn % n_prefill].append(rid)
            turn += router != "shared"
            in_flight += 1
            start_idle()  # an idle instance starts its pass the moment a prompt reaches it (as the engine)
        # 2. prefill passes that end by now; idle instances take the queue
        for p in list(pending_passes):
            end, i, batch, xfer = p
            if end <= now + 1e-12:
                pending_passes.remove(p)
                total = sum(kv_B[r] for r in batch)
                for r in batch:
                    start = max(end, link_free[i])
                    link_free[i] = start + xfer * kv_B[r] / total
                    arrivals_at_decode.append((link_free[i], r))
        start_idle()
        # 3. decode: admit arrived requests at this step boundary
        arrivals_at_decode.sort()
        while arrivals_at_decode and arrivals_at_decode[0][0] <= now + 1e-12:
            waiting.append(arrivals_at_decode.pop(0)[1])
        while waiting:
            r = waiting[0]
            ok = [j for j in range(ranks) if rank_n[j] < cap_rank and (rank_res[j] + prompt[r] + output[r] <= decode_pred.kv_tokens_per_rank or rank_n[j] == 0)]
            if not ok:
                break
            j = next((x % ranks for x in range(rr, rr + ranks) if x % ranks in ok))
            rr = j + 1
            waiting.popleft()
            first[r] = now
            if output[r] <= 1:
                finish[r] = now
                done += 1
                in_flight -= 1
                continue
            running[r] = [j, 0, float(prompt[r])]
            rank_n[j] += 1
            rank_kv[j] += prompt[r]
            rank_res[j] += prompt[r] + output[r]
        # 4. one decode step, or jump to the next event when decode is idle
        if running:
            hot = float(rank_kv.max()) / (len(running) / ranks)
            dt = decode_pred.step(len(running) / decode_pred.npus, hot)
            now += dt
            for r in list(running):
                j, emitted, kv = running[r]
                x = 1
                for _ in range(k):
                    if rng.random() < a:
                        x += 1
                    else:
                        break
                emitted += x
                rank_kv[j] += x
                if emitted >= output[r] - 1:
                    finish[r] = now
                    done += 1
                    in_flight -= 1
                    rank_n[j] -= 1
                    rank_kv[j] -= prompt[r] + emitted
                    rank_res[j] -= prompt[r] + output[r]
                    del running[r]
                else:
                    running[r] = [j, emitted, kv + x]
        else:
            nxt = [p[0] for p in pending_passes] + [x[0] for x in arrivals_at_decode]
            if ptr < n and in_flight < max_concurrency:
                nxt.append(arrival[order[ptr]])
            if not nxt:
                break
            now = max(now, min(nxt))
    return send, first, finish
