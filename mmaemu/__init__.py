"""mmaemu: the exact bits of NVIDIA FP8 tensor-core GEMMs, on any CPU or CUDA GPU."""
import torch  # noqa: F401  (loads libtorch before the extension)

from . import ops  # noqa: F401  (defines torch.ops.mmaemu.*: schemas, fake kernels)
from . import _C  # noqa: F401  (registers the C++ kernels of scaled_mm, accumulate, mma)
from . import _loader  # noqa: F401  (tells the C loader where kernels, its cache and NVRTC are)
from .errors import (BackendFallbackWarning, BackendUnavailableError, ExperimentalPresetWarning,
                     MmaemuError, ReferenceRejectsError, SplitKUnknownError,
                     UnsupportedFeatureError, UnvalidatedEnvelopeWarning, UnverifiedSplitWarning)
from .api import accumulate, explain, mma, scaled_mm
from .plan import CallPlan
from . import backends  # noqa: F401  (mmaemu.backends.status, selftest, ...)
from .profiles import Preset, Profile, get_preset, get_profile, presets, profiles
from .splitk import SplitDecision
from . import testing
from .emulate import emulate
from . import nn

__version__ = "0.1.0"

__all__ = [
    "scaled_mm", "accumulate", "mma", "explain", "testing", "emulate", "nn", "CallPlan",
    "SplitDecision",
    "Profile", "Preset", "get_profile", "get_preset", "profiles", "presets",
    "MmaemuError", "ReferenceRejectsError", "UnsupportedFeatureError", "SplitKUnknownError",
    "BackendUnavailableError", "ExperimentalPresetWarning", "UnverifiedSplitWarning",
    "UnvalidatedEnvelopeWarning", "BackendFallbackWarning",
]
