"""``python -m quench ARGS``: the ``benchmark`` command line (``run``, ``doctor``, ``verify``,
``list``, ``data``, ``peers``, ``compare``; ``python -m quench --help``) in this process, its
exit status the process's."""

import sys

from . import _native
from ._convert import utf8


def main() -> int:
    """Runs the command line in ``sys.argv[1:]`` and returns its exit status: 2, with one line
    naming it, for an argument that is not UTF-8 (a file name in another encoding), which the
    command line cannot take."""
    try:
        for at, argument in enumerate(sys.argv[1:], start=1):
            utf8(f"argument {at}", argument)
    except ValueError as error:
        # The command line's own refusals are a line on stderr and status 2: the same here.
        print(f"error: {error}", file=sys.stderr)
        return 2
    return _native.cli(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
