"""Deployment planning (``cmperf plan``, docs/model.md §9): how to split NPUs into prefill,
decode or co-located instances for a workload and its SLOs, and the rate it serves.

The planner (and pandas, which it needs) is imported when first used: ``cmperf.plan.workload``
alone, which a simulation reads, stays light."""

__all__ = ["Plan", "default_workload", "plan"]


def __getattr__(name):
    if name in __all__:
        from . import planner

        return getattr(planner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


from .. import callable_module  # noqa: E402  (``from cmperf import plan``: cmperf/__init__.py)

callable_module(__name__, "plan")
