import os
import sys

# The references live next to the tests.
sys.path.insert(0, os.path.dirname(__file__))
