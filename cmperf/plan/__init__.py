"""Deployment planning (``cmperf plan``, docs/model.md §9): how to split NPUs into prefill,
decode or co-located instances for a workload and its SLOs, and the rate it serves."""

from .planner import Plan, default_workload, plan

__all__ = ["Plan", "default_workload", "plan"]


from .. import callable_module  # noqa: E402  (``from cmperf import plan``: cmperf/__init__.py)

callable_module(__name__, "plan")
