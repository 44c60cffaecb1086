"""``python -m cmperf.calibration [REFERENCE ...] [--write]``: re-fit the parameters a
reference file calibrates (its ``fit`` and ``measured`` sections), print them and every row;
with ``--write`` store them in the built-in spec files, run each file's cross-validation and
write its system's prediction bands (docs/calibration.md). With no file: every built-in
reference file in turn. ``--stack NAME``: fit the stack's host constants to its released
serving runs instead (cmperf/reference/*-serving.yaml), with each run's leave-one-run-out
error; ``--write`` stores them in stacks/NAME.yaml."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import CmperfError, ConfigError, SpecError
from ..predict import load_specs
from .crossval import band_entry, cross_validate, steps, write_bands
from .fit import evidence, fit_result, params_of, write
from .reference import builtin_references, load_reference
from .validate import evaluate, spec_value, specs_for


def calibrate_file(path, do_write: bool, progress=None) -> dict | None:
    """Fit one file and print it; with ``do_write``, store the values and return its
    system's band entry (None without ``--write``). ``progress(done, total)`` after each fit
    (:func:`fits`)."""
    ref = load_reference(path)
    specs = specs_for(ref)
    total = fits(ref, do_write)
    result = fit_result(ref, specs)
    if progress:
        progress(1, total)
    values = result.values
    ev = evidence(ref)
    print(f"== {ref.name}: {len(ref.fit)} parameters fitted to {len(ev.rows)} evidence rows "
          f"(groups {', '.join(sorted({r.fold for r in ev.rows}))}; known misses are not fitted to)"
          + "".join(f"; {mea.path} measured from {mea.row}" for mea in ref.measured))
    meaning = {p.path: p.meaning for p in params_of(ref)} | {mea.path: mea.meaning for mea in ref.measured}
    for field, v in values.items():
        print(f"  {field:45s} = {v:.4g}    # {meaning[field]}")
    for field in result.kept:
        print(f"  {field:45s} = {spec_value(specs, field):.4g}    # NOT IDENTIFIED by these rows: "
              f"the spec file's value is kept")
    out = evaluate(ref, specs, values)
    print(out[["id", "kind", "predicted", "paper", "error", "pass"]].to_string(index=False))
    if not do_write:
        return None
    name = f"cmperf/reference/{Path(path).name}"
    groups = ", ".join(sorted({r.fold for r in ev.rows}))
    sources = {p.path: f"fitted: {p.meaning}; jointly to the evidence rows of {name} ({groups}; docs/calibration.md)"
               for p in params_of(ref)}
    sources |= {mea.path: f"measured from row {mea.row} of {name}: {mea.meaning}" for mea in ref.measured}
    sources |= {p: f"ASSUMPTION: not identified by the evidence rows of {name} (the fit's objective does not move "
                   f"when it moves by 10 %; docs/calibration.md): the value before the fit is kept" for p in result.kept}
    kept = {p: spec_value(specs, p) for p in result.kept}
    for line in write({**values, **kept}, specs, sources, force=result.kept):
        print("wrote", line)
    hardware_values = {k: v for k, v in values.items() if k.startswith(("chip.", "system."))}
    for proxy in ref.proxies:  # their sources already say whose value they take
        proxy_specs = load_specs(proxy, ref.model)
        for line in write(per_unit(hardware_values, specs, proxy_specs), proxy_specs):
            print("wrote", line, "(proxy)")
    model_values = {k: v for k, v in values.items() if k.startswith("model.")}
    for proxy in ref.model_proxies:
        for line in write(model_values, load_specs(ref.hardware, proxy)):
            print("wrote", line, "(model proxy)")
    cv = cross_validate(ref, specs_for(ref), result, progress=lambda k, _: progress and progress(1 + k, total))
    print(cv.groups.to_string(index=False))
    return band_entry(cv, ref, Path(path).name)


PER_UNIT = {"chip.die.vector_ops_per_s": "vector_units"}  # a rate the proxy takes per core, times its own cores


def per_unit(values: dict[str, float], source, proxy) -> dict[str, float]:
    """The fitted ``values`` as a proxy system takes them: the same, except a die's rate that
    is a sum over its units (PER_UNIT), which it takes per unit times its own unit count
    (an Ascend 950 die's 64 AI Vector cores at the 910C's fitted rate per core)."""
    src, own = source.views()[0].chip.die, proxy.views()[0].chip.die
    return {k: v * float(getattr(own, PER_UNIT[k])) / float(getattr(src, PER_UNIT[k])) if k in PER_UNIT else v
            for k, v in values.items()}


def fits(ref, do_write: bool) -> int:
    """The fits :func:`calibrate_file` makes of ``ref``: its own, and with ``--write`` the
    cross-validation's folds (:func:`.crossval.steps`)."""
    return 1 + (steps(ref, full_given=True) if do_write else 0)


def write_targets(paths=(), stack: str | None = None) -> list[Path]:
    """The files ``--write`` rewrites: the stack's file (``stack``), or the spec files of each
    reference file in ``paths`` (its chip, system and model, its proxies') and the bands file."""
    from ..bands import BANDS_FILE
    from ..specs.loader import resolve

    if stack is not None:
        return [Path(resolve("stack", stack))]
    out = [BANDS_FILE]
    for p in paths:
        ref = load_reference(p)
        specs = specs_for(ref)
        out += [Path(specs.hardware.chip_path), Path(specs.hardware.system_path), Path(resolve("model", specs.model.name))]
        for proxy in ref.proxies:
            hw = load_specs(proxy, ref.model).hardware
            out += [Path(hw.chip_path), Path(hw.system_path)]
        out += [Path(resolve("model", m)) for m in ref.model_proxies]
    return list(dict.fromkeys(out))


def check_write_targets(files) -> None:
    """Before any fit: every file --write rewrites exists and its directory takes a file (each
    is replaced whole, by renaming a temporary file over it): else one line, naming --write and
    what was found (a read-only checkout, an installed package)."""
    from ..errors import short_path
    from ..report import probe_dir

    for f in files:
        f = Path(f)
        if not f.is_file():
            raise ConfigError(f"--write: {short_path(f)} is not a file (--write stores the fitted values in the "
                              f"spec files of a source checkout)")
        why = probe_dir(f.parent)
        if why:
            raise ConfigError(f"--write: cannot write {short_path(f)}: its directory is not writable ({why}); --write "
                              f"stores the fitted values in the spec files of a source checkout: run it in a writable one")


def main(argv=None) -> int:
    """The command; bad input (an unknown file, a read-only checkout under --write) is one line
    ``cmperf: error: ...`` on stderr and exit 2."""
    try:
        return _main(argv)
    except CmperfError as e:
        from ..errors import short

        print(f"cmperf: error: {short(str(e), 2000)}", file=sys.stderr)
        return e.exit_code


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cmperf.calibration",
                                 description=__doc__.split(": ", 1)[1].replace("``", "'"))
    ap.add_argument("references", nargs="*", help="reference files (default: every built-in one)")
    ap.add_argument("--write", action="store_true",
                    help="store the fitted values in the built-in spec files and each system's prediction bands")
    ap.add_argument("--stack", metavar="NAME",
                    help="fit the serving stack's host constants to its released runs (the *-serving.yaml files for it)")
    args = ap.parse_args(argv)
    if args.stack:
        return calibrate_stack(args.stack, args.write)
    from ..cli.progress import ProgressBar

    entries = {}
    paths = args.references or builtin_references()
    if args.write:
        check_write_targets(write_targets(paths))
    work = [fits(load_reference(p), args.write) for p in paths]
    progress = ProgressBar("calibrating: fits")
    try:
        for i, path in enumerate(paths):
            entry = calibrate_file(path, args.write, lambda k, _, at=sum(work[:i]): progress(at + k, sum(work)))
            if entry is not None:
                entries[load_reference(path).hardware] = entry
    finally:
        progress.close()
    if entries:
        print("wrote", write_bands({**_stored_entries(), **entries}))
    return 0


def calibrate_stack(name: str, do_write: bool) -> int:
    """Fit the host constants of stack ``name`` to every serving file for it, print the
    constants, each run's leave-one-run-out and in-sample errors and the runs each constant
    moves; with ``do_write``, store them in stacks/NAME.yaml, each with the runs it was fitted to."""
    from .serving import SERVING_FILES, fit_counts, fit_serving, group_fold_table, load_serving, stack_sources

    files = [p for p in SERVING_FILES if load_serving(p)["stack"] == name]
    if not files:
        print(f"calibration: no serving file (cmperf/reference/*-serving.yaml) is for stack '{name}'", file=sys.stderr)
        return 2
    if do_write:
        check_write_targets(write_targets(stack=name))
    for path in files:
        f = fit_serving(path)
        print(f"== {path.name}: {fit_counts(f, name)} ({f['evaluations']} simulated points)")
        for p in f["params"]:
            folds = [v[p["path"]] for k, v in f["values"].items() if k != "all runs"]
            print(f"  {p['path']:28s} = {f['values']['all runs'][p['path']]:.4g}  (folds {min(folds):.4g} ... "
                  f"{max(folds):.4g})    # {p['meaning']}; moves {len(f['moves'][p['path']])} metrics")
        rows = f["rows"]
        print(rows[["id", "metric", "measured", "simulated", "error_pct", "in_sample_error_pct", "target_pct",
                    "within", "fold"]].to_string(index=False))
        print(f"{int(rows['within'].sum())} of {len(rows)} metrics within their targets, each predicted by a fit that "
              f"did not see its run")
        print(group_fold_table(f).to_string(index=False))
        if do_write:
            from ..predict import load_specs

            ref = load_serving(path)
            specs = load_specs(ref["hardware"], ref["model"], [], name)
            values = f["values"]["all runs"]
            for line in write(values, specs, stack_sources(path, f), force=tuple(values)):
                print("wrote", line)
    return 0


def _stored_entries() -> dict[str, dict]:
    """The bands file's calibrated systems as :func:`band_entry` gives them (the files not
    re-run keep theirs); none when the file cannot be read."""
    from ..bands import PHASES, load_bands

    try:
        systems = load_bands()["systems"]
    except SpecError:
        return {}
    return {name: {"model": e["model"], "reference": e["reference"], **{ph: e[ph]._asdict() for ph in PHASES}}
            for name, e in systems.items()}


if __name__ == "__main__":
    sys.exit(main())
