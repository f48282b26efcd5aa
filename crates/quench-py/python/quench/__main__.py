"""``python -m quench ARGS``: the ``benchmark`` command line (``run``, ``doctor``, ``verify``,
``list``, ``data``, ``peers``, ``compare``; ``python -m quench --help``) in this process, its
exit status the process's."""

import sys

from . import _native


def main() -> int:
    """Runs the command line in ``sys.argv[1:]`` and returns its exit status; arguments that
    are not UTF-8 (a file name in another encoding) reach it as the operating system's bytes,
    as they reach the ``benchmark`` binary."""
    return _native.cli(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
