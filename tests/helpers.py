"""Assertions shared by the CLI tests."""


def one_line_error(code, err, *names):
    """A bad input ends in exit 2 and one line on stderr naming each of ``names``; no traceback."""
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]
