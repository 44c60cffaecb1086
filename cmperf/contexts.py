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
