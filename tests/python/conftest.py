"""pytest setup for the end-to-end tests: corpus programs and helpers run from this tree
must not leave __pycache__ directories in it."""
import os
import sys

os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
sys.dont_write_bytecode = True
