"""``python -m cmperf.calibration [REFERENCE ...] [--write]``: re-fit the parameters a
reference file calibrates (its ``fit`` and ``measured`` sections), print them and every row;
with ``--write`` store them in the built-in spec files and, for the CloudMatrix384 paper, run
the cross-validation and write the prediction bands (docs/calibration.md). With no file:
every built-in reference file in turn."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .crossval import bands_from, cross_validate, write_bands
from .fit import evidence, fit, params_of, write
from .reference import BUILTIN_REFERENCE, builtin_references, load_reference
from .validate import evaluate, specs_for


def calibrate_file(path, do_write: bool) -> None:
    ref = load_reference(path)
    specs = specs_for(ref)
    values = fit(ref, specs)
    ev = evidence(ref)
    print(f"== {ref.name}: {len(ref.fit)} parameters fitted to {len(ev.rows)} evidence rows "
          f"(groups {', '.join(sorted({r.fold for r in ev.rows}))})"
          + "".join(f"; {mea.path} measured from {mea.row}" for mea in ref.measured))
    meaning = {p.path: p.meaning for p in params_of(ref)} | {mea.path: mea.meaning for mea in ref.measured}
    for field, v in values.items():
        print(f"  {field:45s} = {v:.4g}    # {meaning[field]}")
    out = evaluate(ref, specs, values)
    print(out[["id", "kind", "predicted", "paper", "error", "pass"]].to_string(index=False))
    if do_write:
        name = f"cmperf/reference/{Path(path).name}"
        groups = ", ".join(sorted({r.fold for r in ev.rows}))
        sources = {p.path: f"fitted: {p.meaning}; jointly to the evidence rows of {name} ({groups}; docs/calibration.md)"
                   for p in params_of(ref)}
        sources |= {mea.path: f"measured from row {mea.row} of {name}: {mea.meaning}" for mea in ref.measured}
        for line in write(values, specs, sources):
            print("wrote", line)
        if Path(path).resolve() == BUILTIN_REFERENCE.resolve():
            cv = cross_validate(ref, specs_for(ref))
            print(cv.groups.to_string(index=False))
            print("wrote", write_bands(bands_from(cv, ref), cv, ref))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cmperf.calibration",
                                 description=__doc__.split(": ", 1)[1].replace("``", "'"))
    ap.add_argument("references", nargs="*", help="reference files (default: every built-in one)")
    ap.add_argument("--write", action="store_true",
                    help="store the fitted values in the built-in spec files (and, for the paper, the prediction bands)")
    args = ap.parse_args(argv)
    for path in args.references or builtin_references():
        calibrate_file(path, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
