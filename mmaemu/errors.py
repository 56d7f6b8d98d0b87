"""The exceptions and warnings of mmaemu (user guide section 9).

Every exception derives from MmaemuError and from the built-in class a caller would catch
anyway, so `except RuntimeError` keeps working around code that switches to mmaemu.
"""


class MmaemuError(RuntimeError):
    """Base class of mmaemu's errors (also raised as is, e.g. when the CPU flushes subnormals)."""


class ReferenceRejectsError(MmaemuError):
    """torch 2.7.1 or the profile's cuBLAS would reject this call (layout, divisibility, dtypes)."""


class UnsupportedFeatureError(MmaemuError, NotImplementedError):
    """bias, row-wise scales, grad mode, or a feature an experimental preset lacks."""


class SplitKUnknownError(MmaemuError, LookupError):
    """The split-K decision is unknown for this shape; pass `splitk` explicitly."""


class BackendUnavailableError(MmaemuError):
    """An explicitly requested backend cannot run here."""


class ExperimentalPresetWarning(UserWarning):
    """An experimental preset or profile is in use."""


class UnverifiedSplitWarning(UserWarning):
    """A split decision whose reduction was never replayed on hardware."""


class UnvalidatedEnvelopeWarning(UnverifiedSplitWarning):
    """S = 1 inferred by an envelope that failed its held-out test."""


class BackendFallbackWarning(UserWarning):
    """A faster kernel could not be used; a slower one (or the reference model) ran instead."""
