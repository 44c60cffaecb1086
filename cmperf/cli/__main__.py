"""``python -m cmperf.cli``: the same as the ``cmperf`` command."""

from . import main

if __name__ == "__main__":
    main()
