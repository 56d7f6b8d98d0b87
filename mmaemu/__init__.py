"""mmaemu: the exact bits of NVIDIA FP8 tensor-core GEMMs, on any CPU or CUDA GPU.

The layers, each in its own folder (docs/architecture.md): the public functions and their
checks here (api, validation, ops, errors, testing, formats); planning/ (every decision: profiles,
split-K, executors, the plan); runtime/ (the environment, the C core's loader and registry,
the cached facts, warm-up, self-test, diagnostics); integrations/ (emulate, nn, TE state, vortex).
"""
import sys

import torch  # noqa: F401  (loads libtorch before the extension)

from . import ops  # noqa: F401  (defines torch.ops.mmaemu.*: schemas, fake kernels)
from . import _C  # noqa: F401  (registers the C++ kernels of scaled_mm, accumulate, mma)
from .runtime import loader  # noqa: F401  (tells the C loader where kernels, its cache and NVRTC are)
from .errors import (BackendFallbackWarning, BackendUnavailableError, ExperimentalPresetWarning,
                     MmaemuError, ReferenceRejectsError, SplitKUnknownError,
                     UnsupportedFeatureError, UnvalidatedEnvelopeWarning, UnverifiedSplitWarning)
from .api import accumulate, explain, mma, scaled_grouped_mm, scaled_mm
from .planning.plan import CallPlan
from .planning.profiles import Preset, Profile, get_preset, get_profile, presets, profiles
from .planning.splitk import SplitDecision
from . import testing
from .integrations.emulate import emulate
from .integrations import nn

sys.modules[__name__ + ".nn"] = nn   # the public name of the layers: mmaemu.nn

from .version import __version__  # noqa: E402, F401  (public)

__all__ = [
    "scaled_mm", "scaled_grouped_mm", "accumulate", "mma", "explain", "testing", "emulate", "nn", "CallPlan",
    "SplitDecision",
    "Profile", "Preset", "get_profile", "get_preset", "profiles", "presets",
    "MmaemuError", "ReferenceRejectsError", "UnsupportedFeatureError", "SplitKUnknownError",
    "BackendUnavailableError", "ExperimentalPresetWarning", "UnverifiedSplitWarning",
    "UnvalidatedEnvelopeWarning", "BackendFallbackWarning",
]
