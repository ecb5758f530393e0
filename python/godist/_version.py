"""The package's version: the one place it is written (setup.py reads it
from this file without importing the package)."""

__version__ = "0.1.0"
