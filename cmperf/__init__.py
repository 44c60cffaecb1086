"""cmperf: analytical performance model of DeepSeek-R1 serving on Huawei CloudMatrix384.

Data flows one way: specs (cmperf.specs) -> per-operator cost (cmperf.cost) -> phase
schedules (cmperf.schedule) -> search/validation -> reports -> CLI.
"""

__version__ = "0.1.0"
