"""``python -m cmperf.calibration [--write]``: re-fit the parameters no table gives, print
them and every row; with ``--write`` store them in the built-in spec files, run the
cross-validation and write the prediction bands (docs/calibration.md)."""

from __future__ import annotations

import argparse
import sys

from ..predict import load_specs
from .crossval import bands_from, cross_validate, write_bands
from .fit import IMBALANCE, IMBALANCE_ROW, PARAMS, evidence, fit, write
from .reference import load_reference
from .validate import evaluate


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cmperf.calibration", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true",
                    help="store the fitted values in the built-in spec files and the prediction bands (runs the cross-validation)")
    args = ap.parse_args(argv)
    ref = load_reference()
    specs = load_specs(ref.hardware, ref.model)
    values = fit(ref, specs)
    ev = evidence(ref)
    print(f"fitted {len(PARAMS)} parameters to {len(ev.rows)} evidence rows "
          f"(groups {', '.join(sorted({r.fold for r in ev.rows}))}); {IMBALANCE.path} measured from {IMBALANCE_ROW}:")
    for p in PARAMS + [IMBALANCE]:
        print(f"  {p.path:45s} = {values[p.path]:.4g}    # {p.meaning}")
    out = evaluate(ref, specs, values)
    print(out[["id", "kind", "predicted", "paper", "error", "pass"]].to_string(index=False))
    if args.write:
        for line in write(values, specs):
            print("wrote", line)
        cv = cross_validate(ref, load_specs(ref.hardware, ref.model))
        print(cv.groups.to_string(index=False))
        print("wrote", write_bands(bands_from(cv, ref), cv, ref))
    return 0


if __name__ == "__main__":
    sys.exit(main())
