"""The default deployment of each built-in model on a system (``cmperf hw show SYSTEM``,
``--deployment-out``): the decode and prefill instance every prediction on the system runs when
the user gives no instance (cmperf/deployment.py derives it; this module only asks
:func:`cmperf.predict.predict` for its default row and reports what it chose)."""

from __future__ import annotations

from typing import Iterable

INPUTS = ("dies", "ep", "tp", "attn_tp", "batch", "tokens_per_npu", "mtp")


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def model_defaults(hardware: str, model: str, sets: Iterable[str] = ()) -> list[dict]:
    """Rows (model, phase, dies, NPUs, EP, TP, batch or tokens per NPU, MTP, note) of the
    default decode and prefill instance of ``model`` on ``hardware``."""
    from ..errors import CmperfError
    from ..predict import load_specs, predict

    try:
        specs = load_specs(hardware, model, list(sets))
    except CmperfError as e:
        return [{"model": model, "phase": "-", "note": f"cannot load: {e}"}]
    hw, m = specs.views()
    moe = m.moe is not None
    dpp = int(hw.chip.dies_per_package)
    total = hw.system_dies
    rows = []
    for phase in ("decode", "prefill"):
        try:
            r = predict(phase, {}, specs)
        except CmperfError as e:
            rows.append({"model": model, "phase": phase, "note": str(e)})
            continue
        c = {k: _plain(r.columns[k].iat[0]) for k in INPUTS if k in r.columns}
        dies = int(c["dies"])
        from ..advice import slow_dtype_notes

        notes = [*specs.notes, *slow_dtype_notes(specs)] if phase == "decode" else []
        if dies > total:
            notes.append(f"the instance needs {dies:,} dies; the system has {total:,}")
        elif phase == "decode" and dies == total:
            notes.append(f"the decode instance takes all {total:,} dies of the system: none left for prefill")
        row = {"model": model, "phase": phase, "dies": dies, "npus": dies / dpp, "ep": int(c.get("ep", dies)) if moe else None,
               "tp": int(c.get("tp", c.get("attn_tp", 1))), "mtp": int(c.get("mtp", 0)),
               "batch_per_npu": float(c["batch"]) if phase == "decode" else None,
               "tokens_per_npu": float(c["tokens_per_npu"]) if phase == "prefill" else None,
               "note": "; ".join(notes)}
        rows.append(row)
    return rows


def system_defaults(hardware: str, sets: Iterable[str] = (), models: Iterable[str] | None = None) -> list[dict]:
    """:func:`model_defaults` of every built-in model (or ``models``) on ``hardware``."""
    from ..specs.loader import list_builtin

    names = list(models) if models is not None else [n for n, _ in list_builtin("model")]
    return [row for m in names for row in model_defaults(hardware, m, sets)]


def deployment_file(hardware: str, model: str | None, sets: Iterable[str] = ()) -> dict:
    """The default deployment of ``model`` (the system's when None) as ``--deployment`` reads
    it: what ``cmperf simulate`` runs when given none (cmperf/simulate/deployment.py:
    default_deployment; the planner's at the default workload where the system publishes no
    instance counts, or where this model's instances of them do not fit)."""
    from ..export import from_deployment
    from ..plan import default_workload
    from ..predict import load_specs, system_model
    from ..simulate.deployment import default_deployment

    specs = load_specs(hardware, model or system_model(hardware), list(sets))
    dep = default_deployment(specs, default_workload())
    return from_deployment(dep, [g.inputs for g in dep.decode], [g.inputs for g in dep.prefill]).deployment_file()
