"""Whether a CUDA kernel can run at all: facts of the kernel table, the device and the loader.

Each function returns None when nothing stands in the way, else the reason in words. Which
kernel a call takes among those that can run is planning/executors.py's policy.
"""
from . import config, loader
from .registry import KERNELS, NOT_BUILT


def static_reason(kernel, device, preset=None):
    """Can this kernel run (this preset) on CUDA device `device`: built, implements the preset,
    CUDA enabled, a device of a capability it runs on, its module loads."""
    if kernel in NOT_BUILT:
        return NOT_BUILT[kernel]
    k = KERNELS[kernel]
    if preset is not None and preset not in k.presets:
        return f"{kernel} does not implement the '{preset}' preset"
    if loader.cuda_disabled():
        return "CUDA disabled by MMAEMU_DISABLE_CUDA"
    info = loader.device_info(device)
    if info is None:
        return f"no CUDA device {device}: {loader.driver_status()}"
    if k.only_cc is not None and info["cc"] != k.only_cc:
        return f"{kernel} runs on sm_{k.only_cc} only (device {device} is sm_{info['cc']})"
    if info["cc"] < k.min_cc:
        return f"{kernel} needs sm_{k.min_cc} or newer (device {device} is sm_{info['cc']})"
    ok, detail = loader.kernel_check(device, kernel)
    if not ok:
        return f"{kernel} does not load: {detail}"
    return None


def split_reason(kernel, preset, rr_tile, splits):
    """Does the kernel compute the plan's split layout: a preset that deals k tiles round-robin
    (rr_tile > 0: ada) to S > 1 slices needs a kernel with that capability in the table
    (round_robin_splits: the reference kernel), as the loader refuses it on the others."""
    if splits <= 1 or not rr_tile or KERNELS[kernel].round_robin_splits:
        return None
    return (f"{kernel} computes contiguous split slices only (the '{preset}' preset deals "
            f"{rr_tile}-k tiles round-robin to its {splits} slices)")


# Policy read here because it is the trust a gate needs: the compute capabilities on which a
# gated kernel may be taken without MMAEMU_ALLOW_GATED_KERNELS (after its self-test there).
# cuda:wgmma runs on sm_90 only (the table's only_cc): its schedule was written for Hopper's
# wgmma (inferred).
GATE_TRUSTED_CCS = {"cuda:wgmma": (90,)}


def gate_reason(kernel, device):
    """For gated kernels: None if `auto` may take it on this device (after its self-test)."""
    k = KERNELS[kernel]
    if not k.gated:
        return None
    trusted = GATE_TRUSTED_CCS.get(kernel, ())
    info = loader.device_info(device)
    if info["cc"] in trusted or config.get("MMAEMU_ALLOW_GATED_KERNELS"):
        return None
    return (f"{kernel} is gated: trusted on sm_{', sm_'.join(map(str, trusted))} only "
            f"(device {device} is sm_{info['cc']}); MMAEMU_ALLOW_GATED_KERNELS=1 allows it "
            "after its self-test")
