"""``cmperf validate``: replay published results (predicted vs paper, error, pass/fail).

A single command, not a group: :mod:`cmperf.cli` registers :func:`validate_cmd` on the root app.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .options import FormatOpt, SetOpt


def _rows_table(res, title):
    from ..report import print_table

    shown = res[["id", "where", "metric", "predicted", "paper", "error", "tolerance", "pass"]].copy()
    pct = res["unit"] == "%"
    shown["predicted"] = shown["predicted"].map(lambda v: f"{v:.4g}")
    shown["error"] = [f"{e:+.1f} %" if p else f"{100 * e:+.1f} pt" for e, p in zip(res["error"], pct)]
    shown["tolerance"] = [f"±{t:g} %" if p else f"±{100 * t:g} pt" for t, p in zip(res["tolerance"], pct)]
    shown["pass"] = ["pass" if w and not k else "pass (drop known_miss)" if w else "known miss" if k else "FAIL"
                     for w, k in zip(res["within"], res["known_miss"] != "")]
    if (res["derived_from"] != "").any():
        shown["from"] = res["derived_from"]
    print_table(shown, title)



def validate_cmd(
    files: Optional[List[str]] = typer.Argument(None, help="reference files (default: every built-in one: the CloudMatrix384 paper and each platform's micro-benchmarks)"),
    sensitivity: bool = typer.Option(False, "--sensitivity", help="also show how headline rows move when each parameter moves +-10 %"),
    cross_validate: bool = typer.Option(False, "--cross-validate",
                                        help="re-fit without each group of evidence rows and predict it; a fold that leaves a parameter unidentified or at a search bound is reported, not scored (about a minute for the built-in files)"),
    serving: bool = typer.Option(False, "--serving", help="replay the released serving runs (cmperf/reference/*-serving.yaml) through "
                                                          "cmperf simulate instead: each run at a fit of the stack's host constants to the "
                                                          "other runs (leave-one-run-out; about a minute per file)"),
    fmt: str = FormatOpt, sets: Optional[List[str]] = SetOpt,
):
    """Replay published results: predicted vs paper, error, pass/fail; exit 1 if a row fails.
    The headline counts evidence rows only; derived and spec rows are listed apart.
    Example: cmperf validate --cross-validate"""
    import pandas as pd

    if serving:
        _serving(files, fmt)
        return

    from ..calibration.reference import builtin_references, load_reference
    from ..calibration.validate import evaluate, fitted_parameters, specs_for, summary
    from ..calibration.validate import sensitivity as sens
    from ..report import check_format, print_csv, print_json, provenance

    from ..calibration.crossval import cross_validate as run_cv
    from ..calibration.crossval import steps
    from .progress import ProgressBar

    check_format(fmt)
    reports = []
    from ..errors import CmperfError, SpecError

    paths = files or [str(p) for p in builtin_references()]
    refs = [load_reference(f) for f in paths]
    # one step a file, and with --cross-validate one a fit (the file's and each fold's)
    work = [1 + (steps(ref) if cross_validate and ref.fit else 0) for ref in refs]
    progress, done = ProgressBar("validating: files and fits"), 0
    try:
        for f, ref, n in zip(paths, refs, work):
            try:  # the file's hardware, model and rows: an error names the file
                specs = specs_for(ref, sets or [])
                res = evaluate(ref, specs)
            except CmperfError as e:
                raise SpecError(str(e) if str(e).startswith(f"{f}:") else f"{f}: {e}") from None
            res.insert(0, "file", ref.name)
            report = {"ref": ref, "res": res, "fitted": fitted_parameters(specs),
                      "sens": sens(ref, specs) if sensitivity else None, "cv": None}
            if cross_validate and ref.fit:
                report["cv"] = run_cv(ref, specs, progress=lambda k, _, at=done: progress(at + k, sum(work)))
            done += n
            progress(done, sum(work))
            reports.append(report)
    finally:
        progress.close()
    res = pd.concat([r["res"] for r in reports], ignore_index=True)
    stats = summary(res)
    prov = provenance("validate " + " ".join(r["ref"].name for r in reports), _joined(r["ref"].hardware for r in reports),
                      _joined(r["ref"].model for r in reports), sets or [])
    sens_table = pd.concat([r["sens"] for r in reports]) if sensitivity else None
    if fmt == "json":
        obj = {"rows": res.to_dict(orient="records"), "summary": stats,
               "files": [{"name": r["ref"].name, "hardware": r["ref"].hardware, "model": r["ref"].model,
                          "summary": summary(r["res"]), "fitted_parameters": r["fitted"].to_dict(orient="records")}
                         for r in reports],
               "fitted_parameters": reports[0]["fitted"].to_dict(orient="records")}
        if sensitivity:
            obj["sensitivity"] = sens_table.to_dict(orient="records")
        cvs = [r for r in reports if r["cv"] is not None]
        if cvs:
            cv = cvs[0]["cv"]
            obj["cross_validation"] = {"groups": cv.groups.to_dict(orient="records"),
                                       "rows": cv.rows.to_dict(orient="records"),
                                       "parameters": cv.parameters.to_dict(orient="records"),
                                       "not_identified": cv.flags.to_dict(orient="records")}
            obj["cross_validation_files"] = {r["ref"].name: r["cv"].groups.to_dict(orient="records") for r in cvs}
            obj["cross_validation_not_identified"] = {r["ref"].name: r["cv"].flags.to_dict(orient="records") for r in cvs}
        print_json({**obj, "provenance": prov})
    elif fmt == "csv":
        tables = {"rows": res, **({"sensitivity": sens_table} if sensitivity else {}), **_cv_tables(reports)}
        print_csv(tables if len(tables) > 1 else res, prov)
    else:
        for r in reports:
            _print_file(r)
        if len(reports) > 1:
            typer.echo(f"all files: {stats['evidence_rows']} evidence rows, {stats['evidence_within']} within tolerance, "
                       f"{stats['known_misses'] - stats['known_misses_now_within']} known misses; "
                       f"{stats['rows']} rows in all, {stats['failed']} failing")
    if stats["failed"]:
        raise typer.Exit(1)


def _cv_tables(reports) -> dict:
    """The cross-validation tables of every file, for CSV (empty without --cross-validate)."""
    import pandas as pd

    cvs = [r for r in reports if r["cv"] is not None]
    if not cvs:
        return {}
    joined = lambda part: pd.concat([getattr(r["cv"], part).assign(file=r["ref"].name) for r in cvs],  # noqa: E731
                                    ignore_index=True)
    return {"cross_validation_groups": joined("groups"), "cross_validation_rows": joined("rows"),
            "cross_validation_not_identified": joined("flags")}


def _joined(names) -> str:
    """Distinct names in order, comma-separated (the specs of several reference files)."""
    return ",".join(dict.fromkeys(str(n) for n in names))


def _print_file(r) -> None:
    import pandas as pd

    from ..calibration.validate import summary
    from ..report import print_table

    ref, res, fitted = r["ref"], r["res"], r["fitted"]
    stats = summary(res)
    typer.echo(f"\n{ref.name} ({ref.hardware}, {ref.model}): {ref.source}")
    if stats["evidence_rows"]:
        _rows_table(res[res["kind"] == "evidence"], "evidence: independent published measurements, predicted")
        misses = res[(res["kind"] == "evidence") & (res["known_miss"] != "") & ~res["within"]]
        typer.echo(f"evidence: {stats['evidence_rows']} rows, {stats['evidence_within']} within "
                   f"tolerance{f', {len(misses)} known misses' if len(misses) else ''}; mean |error| {stats['evidence_mean_abs_error_pct']:.2f} %, max "
                   f"{stats['evidence_max_abs_error_pct']:.2f} %"
                   + (f"; ablation rows max |error| {100 * stats['evidence_max_abs_error_abs']:.1f} points"
                      if stats["evidence_max_abs_error_abs"] == stats["evidence_max_abs_error_abs"] else ""))
        for reason, ids in misses.groupby("known_miss")["id"]:
            typer.echo(f"known miss ({', '.join(ids)}): {reason}")
    for kind, title in (("derived", "derived rows: arithmetic on another row, or the row a parameter is read from "
                                    "(bookkeeping, cannot fail alone)"),
                        ("spec", "spec rows: hardware-file values against the tables they come from")):
        part = res[res["kind"] == kind]
        if len(part):
            _rows_table(part, title)
    if len(fitted):
        print_table(fitted.assign(value=fitted["value"].map(lambda v: f"{v:.4g}")),
                    f"fitted parameters ({len(fitted)}; re-fit with: python -m cmperf.calibration)")
    t = r["sens"]
    if t is not None:
        t = t[t["max_abs_change_pct"] > 0.05]
        rows = sorted({c.rsplit(" ", 1)[0] for c in t.columns if c.endswith("%") and " " in c})
        compact = pd.DataFrame({"parameter": t["parameter"]})
        for row in rows:
            minus = next(c for c in t.columns if c.startswith(f"{row} -"))
            plus = next(c for c in t.columns if c.startswith(f"{row} +"))
            compact[row] = [f"{a:+.1f}/{b:+.1f}" for a, b in zip(t[minus], t[plus])]
        print_table(compact, "sensitivity: % change of each headline row when the parameter moves -10 % / +10 %")
    cv = r["cv"]
    if cv is not None:
        g = cv.groups.copy()
        for c in ("held_out_max_abs_error", "held_out_mean_abs_error", "in_sample_max_abs_error"):
            g[c] = ["not a prediction" if c.startswith("held") and not ok else f"{v:.2f} %" if u == "%" else
                    f"{100 * v:.1f} pt" for v, u, ok in zip(g[c], g["unit"], g["predicts"])]
        g["predicts"] = g["predicts"].map(lambda v: "yes" if v else "NO")
        print_table(g.drop(columns=["unit", "not_identified"]),
                    "cross-validation: each evidence group predicted by a fit to the others")
        for row in cv.flags.itertuples():
            typer.echo(f"without {row.group}: {row.parameter} {row.why} (value {row.value:.4g}): "
                       f"the fold does not predict {row.group}, and gives no band")
        p = cv.parameters[["parameter", "full fit", "min", "max", "spread_pct"]].copy()
        for c in ("full fit", "min", "max"):
            p[c] = p[c].map(lambda v: f"{v:.4g}" if v == v else "-")
        p["spread_pct"] = [f"{v:.1f} %" if v == v else "no fold identifies it" if n == 0 else "one fold identifies it"
                           for v, n in zip(p["spread_pct"], cv.parameters["identified_in"])]
        p.loc[cv.parameters["kept"].to_numpy(), ["min", "max", "spread_pct"]] = "not identified: spec value kept"
        print_table(p, "fitted parameters across the folds that identify them")


def _fit_serving_cached(path) -> dict:
    """:func:`fit_serving` of one serving file, kept in the answer cache (cli/cache.py): the
    leave-one-run-out fit re-simulates every run at up to 122 points (~10 s of CPU), and its
    answer depends only on the file, the specs it names and cmperf's code, which the key holds."""
    import json

    import pandas as pd

    from ..calibration.serving import fit_serving, load_serving
    from ..predict import load_specs
    from .cache import cached

    ref = load_serving(path)
    specs = load_specs(ref["hardware"], ref["model"], [], ref["stack"])
    key = {"file": Path(path).read_text(encoding="utf-8"), "system": specs.hardware.system.model_dump(mode="json"),
           "chip": specs.hardware.chip.model_dump(mode="json"), "model": specs.model.model_dump(mode="json"),
           "stack": specs.stack}

    def compute() -> dict:  # as JSON gives it back (NaN as null, numpy numbers as floats), so that it is cached
        f = fit_serving(path)
        rest = json.loads(json.dumps({k: v for k, v in f.items() if k != "rows"}, default=float))
        return {**rest, "rows": json.loads(f["rows"].to_json(orient="records"))}

    f = cached("servingfit", key, compute)
    return {**f, "rows": pd.DataFrame(f["rows"])}


def _serving(files, fmt: str) -> None:
    """Serving evidence replayed through the simulation (docs/calibration.md#serving-evidence).
    A file with a ``fit:`` section (the stack's host constants) is reported leave-one-run-out:
    every run's metrics at the fit to the OTHER runs, beside the in-sample error of the fit to
    all, the fitted constants (all runs and the folds' range) and the metrics each moves. A row
    outside its target is reported, not failed."""
    import pandas as pd

    from ..calibration.serving import SERVING_FILES, fit_counts, group_fold_table, load_serving, replay
    from ..report import check_format, print_csv, print_json, print_table, provenance

    check_format(fmt)
    from .progress import ProgressBar

    paths = files or [str(p) for p in SERVING_FILES]
    tables, fits = [], []
    progress = ProgressBar("replaying serving runs")
    for i, p in enumerate(paths):
        progress(i, len(paths))
        if load_serving(p).get("fit"):
            f = _fit_serving_cached(p)
            tables.append(f["rows"].assign(file=str(p)))
            fits.append((p, f))
        else:
            tables.append(replay(p).assign(file=str(p), fold="nothing fitted"))
    progress.close()
    res = pd.concat(tables, ignore_index=True)
    constants = pd.DataFrame([{"file": str(p), "parameter": q["path"], "all runs": f["values"]["all runs"][q["path"]],
                               **{k: v[q["path"]] for k, v in f["values"].items() if k != "all runs"},
                               "moves": "; ".join(f["moves"][q["path"]]), "meaning": q["meaning"]}
                              for p, f in fits for q in f["params"]])
    prov = provenance("validate --serving", None, None, [])
    if fmt == "json":
        print_json({"rows": res.to_dict(orient="records"), "fitted": constants.to_dict(orient="records"),
                    "group_folds": {str(p): f["group_folds"] for p, f in fits}, "provenance": prov})
    elif fmt == "csv":
        print_csv({"rows": res, "fitted": constants} if len(constants) else res, prov)
    else:
        shown = res.assign(measured=res["measured"].map(lambda v: f"{v:,.4g}"), simulated=res["simulated"].map(lambda v: f"{v:,.4g}"),
                           error=res["error_pct"].map(lambda v: f"{v:+.1f} %"), target=res["target_pct"].map(lambda v: f"±{v:g} %"),
                           verdict=res["within"].map(lambda w: "within" if w else "OUTSIDE"))
        cols = ["id", "metric", "measured", "simulated", "error", "target", "verdict"]
        if "fold" in res:
            shown["fold"] = res["fold"].map(lambda v: "without this run" if v.startswith("without") else v
                                            if v.startswith("nothing") else "never fitted: the fit to all")
            cols.append("fold")
        if "in_sample_error_pct" in res:
            shown["in sample"] = res["in_sample_error_pct"].map(lambda v: "" if v != v else f"{v:+.1f} %")
            cols.insert(5, "in sample")
        print_table(shown[cols], "serving evidence replayed through cmperf simulate: each run predicted by a fit "
                                 "of the stack's host constants to the OTHER runs (leave-one-run-out); 'in sample': "
                                 "the fit to all runs (never validation)")
        for p, f in fits:
            folds = [k for k in f["values"] if k != "all runs"]
            rows = [{"parameter": q["path"], "all runs": f"{f['values']['all runs'][q['path']]:.4g}",
                     "folds (min ... max)": f"{min(f['values'][k][q['path']] for k in folds):.4g} ... "
                                            f"{max(f['values'][k][q['path']] for k in folds):.4g}",
                     "fitted to": f"the {f['rows'].loc[~f['rows']['fold'].str.startswith('not'), 'id'].nunique()} "
                                  f"fitted runs but the one predicted",
                     "moves": ", ".join(f["moves"][q["path"]]) or "none"} for q in f["params"]]
            print_table(rows, f"stack constants fitted to {p} (python -m cmperf.calibration --stack NAME --write stores them): "
                              f"{fit_counts(f, load_serving(p)['stack'])}")
            print_table(group_fold_table(f), f"{p}: folds that hold out a family of runs (fitted on the others alone)")
        typer.echo(f"{int(res['within'].sum())} of {len(res)} metrics within their targets"
                   + (" (leave-one-run-out)" if fits else ""))
