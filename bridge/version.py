"""The package version (a leaf: model metadata and saved results stamp it without importing the package)."""

__version__ = "0.1.0"
