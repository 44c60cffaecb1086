"""Options that every cmperf command spells the same way (the modules of cmperf/cli/)."""

from __future__ import annotations

import typer

FormatOpt = typer.Option("table", "--format", "-f", help="table | json | csv (json/csv: data only on stdout)")
HardwareOpt = typer.Option("cloudmatrix384", "--hardware", help="system spec: built-in name or path to a YAML file")
ModelOpt = typer.Option(None, "--model", help="model spec: built-in name, path to a YAML file, or a Hugging Face config.json "
                                              "(default: the system's: deepseek-r1 on cloudmatrix384, deepseek-v3 on h800-cluster)")
StackOpt = typer.Option(None, "--stack", help="serving stack: a stacks/ name (cloudmatrix-infer, xdeepserve, sglang, sglang-ascend, vllm, "
                                              "vllm-ascend) or a YAML path; 'none': the bare cost model (default: the system's)")
SetOpt = typer.Option(None, "--set", help="override a spec field, e.g. chip.die.hbm_bandwidth_Bps=3.2e12 (repeatable)")
