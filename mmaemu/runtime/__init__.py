"""Runtime: the environment, the C core's loader and kernel registry, the cached facts, the self-test and diagnostics."""
