"""Calibration and validation together: reference files (``reference``), replaying them
(``validate``), the fit of the few parameters no table gives (``fit``), and how far it can
be trusted (``crossval``). docs/calibration.md."""
