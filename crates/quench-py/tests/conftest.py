import os
import signal
import sys

# The references live next to the tests.
sys.path.insert(0, os.path.dirname(__file__))

# The Ctrl-C tests deliver SIGINT as Python does (`_thread.interrupt_main`), which does nothing
# where SIGINT is ignored: a process started in the background by a non-interactive shell (a
# script's `... &`) inherits it ignored, and Python then installs no handler of its own. The
# tests install Python's, so that they test Quench's handling of Ctrl-C wherever they run.
signal.signal(signal.SIGINT, signal.default_int_handler)
