"""cmperf: analytical performance model of LLM serving (DeepSeek-R1 and others) on Huawei
CloudMatrix384 / Ascend 910C and on NVIDIA, AMD and other Ascend systems.

    >>> from cmperf import predict, search, plan, simulate, load_specs
    >>> predict("decode", {"batch": 64}).columns["tpot_ms"]

Data flows one way: specs (cmperf.specs) -> per-operator cost (cmperf.cost) -> phase
schedules (cmperf.schedule) -> predict -> search / plan / simulate / compare / validate ->
reports -> CLI. The API's names (docs/api.md) are imported when first asked for (module
``__getattr__``): ``import cmperf`` itself imports nothing, so that ``cmperf --version`` and
every command's start-up stay as cheap as before (benchmarks/startup.py).
"""

__version__ = "0.1.0"

# name -> (module, attribute): the public API, each imported on first use
_API = {
    "predict": ("cmperf.predict", "predict"),
    "load_specs": ("cmperf.predict", "load_specs"),
    "Specs": ("cmperf.predict", "Specs"),
    "Prediction": ("cmperf.predict", "Prediction"),
    "search": ("cmperf.search", "search"),
    "SearchResult": ("cmperf.search", "SearchResult"),
    "plan": ("cmperf.plan.planner", "plan"),
    "Plan": ("cmperf.plan.planner", "Plan"),
    "default_workload": ("cmperf.plan.planner", "default_workload"),
    "Workload": ("cmperf.plan.workload", "Workload"),
    "SLO": ("cmperf.plan.workload", "SLO"),
    "fixed": ("cmperf.plan.workload", "fixed"),
    "simulate": ("cmperf.simulate", "simulate"),
    "SimResult": ("cmperf.simulate", "SimResult"),
    "Traffic": ("cmperf.simulate.requests", "Traffic"),
    "CmperfError": ("cmperf.errors", "CmperfError"),
    "ConfigError": ("cmperf.errors", "ConfigError"),
    "SpecError": ("cmperf.errors", "SpecError"),
}

__all__ = ["__version__", *_API]
_CALLABLE_MODULES = ("predict", "search", "plan", "simulate")


def callable_module(name: str, function: str) -> None:
    """Make the submodule ``name`` callable as its ``function``.

    ``predict``, ``search``, ``plan`` and ``simulate`` are also the names of submodules, and
    importing a submodule makes it the package's attribute of its name: once anything has
    imported ``cmperf.search``, ``from cmperf import search`` gives that module, whatever the
    package defines. So each of the four modules is made callable (calling it calls its
    function of the same name, looked up at the call) and that module is the API's name:
    ``search("decode", ...)`` is ``cmperf.search.search("decode", ...)``, and
    ``cmperf.search.SearchResult`` etc. stay where they were."""
    import sys

    module = sys.modules[name]

    class CallableModule(type(module)):
        def __call__(self, *args, **kwargs):
            return getattr(self, function)(*args, **kwargs)

        @property
        def __signature__(self):
            import inspect

            return inspect.signature(getattr(self, function))

    CallableModule.__name__ = CallableModule.__qualname__ = f"callable_module[{function}]"
    module.__class__ = CallableModule


def __getattr__(name: str):
    """``cmperf.predict`` etc.: the API function or class, imported on first use."""
    if name not in _API:
        raise AttributeError(f"module 'cmperf' has no attribute {name!r}")
    import importlib

    module, attr = _API[name]
    value = importlib.import_module(module)
    if name in _CALLABLE_MODULES:  # the submodule of that name, callable (callable_module): cmperf.plan, not
        return importlib.import_module(f"cmperf.{name}")  # cmperf.plan.planner, where its function is
    value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
