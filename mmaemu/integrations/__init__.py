"""Adapters that run other projects' model code with mmaemu's FP8 GEMMs (optional
dependencies: each submodule imports its project only when called)."""
