"""The model's longest context (``max_context_tokens``, imported from config.json's
``max_position_embeddings``) at the boundaries: a prediction, a plan or a simulation asked
for more tokens than the model attends runs, with one warning that says so (the cost model
extrapolates; the model itself was not trained to attend that far)."""

from __future__ import annotations


def max_context(m) -> int | None:
    """The model's longest context in tokens (``m``: a model spec or its view), None when unknown."""
    mc = getattr(m, "max_context_tokens", None)
    if mc is None:
        return None
    return int(mc if isinstance(mc, (int, float)) else mc.value)


def past_context(m, tokens: float, what: str) -> str | None:
    """The warning for ``tokens`` of context (``what`` names where they come from, e.g.
    '--kv-len 1048576'), None within the model's context or when it is unknown."""
    most = max_context(m)
    if most is None or not tokens > most:
        return None
    name = getattr(m, "name", "the model")
    return (f"{what}: {tokens / most:.3g}x the longest context {name} supports ({most:,} tokens, max_context_tokens): "
            f"the cost model extrapolates past what the model attends")


MAX_LAYERS = 1000  # published models have at most a few hundred layers
MAX_MTP_MODULES = 16  # published MTP heads: 1-3 modules


def implausible_model(m) -> list[str]:
    """What a model spec states past any published model (``m``: a model spec): a window or
    an indexer's top-k at or above the context (they never limit anything), more layers or
    MTP modules than any model has. Warnings: the spec is valid, probably not meant."""
    out = []
    most = max_context(m)
    a = m.attention
    window = getattr(a, "sliding_window", None)
    topk = getattr(getattr(a, "indexer", None), "topk", None)
    if most is not None and window is not None and window >= most:
        out.append(f"attention.sliding_window {window:,} is at least the model's context ({most:,} tokens): "
                   f"its window layers attend the whole context")
    if most is not None and topk is not None and topk >= most:
        out.append(f"attention.indexer.topk {topk:,} is at least the model's context ({most:,} tokens): "
                   f"the indexer selects every key")
    if m.num_layers > MAX_LAYERS:
        out.append(f"num_layers {m.num_layers:,}: more than any published model (at most {MAX_LAYERS:,} here)")
    if m.mtp.modules > MAX_MTP_MODULES:
        out.append(f"mtp.modules {m.mtp.modules:,}: more MTP modules than any published model (1-3; at most "
                   f"{MAX_MTP_MODULES} here)")
    return out
