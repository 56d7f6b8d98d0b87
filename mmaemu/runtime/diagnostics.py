"""Diagnostics: what `python -m mmaemu info` and `selftest` print (user guide section 2).

status() lists every executor with whether it can run here and why; info_report() and
selftest_report() turn that, the versions, the device, the environment, the profiles and
presets, and the self-test results into lines. The facts come from the registry, the loader
and the cached facts; what `auto` would take comes from planning/executors.py. Nothing here
decides which kernel runs.
"""
import os
import platform

import torch

from .. import _C
from . import config, facts, selftest
from .availability import gate_reason, static_reason
from .loader import cuda_disabled, device_count, driver_status, kernel_check, nvrtc_status
from .registry import BACKEND_NAMES, KERNELS, NOT_BUILT, SIMD_KERNELS
from ..planning import executors
from ..planning.profiles import get_profile, presets, profiles
from ..version import __version__


def cpu_status():
    """The `cpu` executor's row: always available on CPU tensors; its SIMD kernels here, their
    measured speed, and which one `auto` takes."""
    kernels = [n for n, k in SIMD_KERNELS.items() if k["available"]]
    rates = facts.cpu_simd_rates()
    speed = ("speed measured here (one thread, hopper fast): " + ", ".join(
        f"{n} {rates[n] * 1e-9:.1f} GMAC/s" for n in kernels if rates and n in rates)) \
        if rates else "speed not measured on this machine yet (the first CPU call measures it)"
    notes = "; ".join(k["note"] for n, k in SIMD_KERNELS.items() if k["available"] and k["note"])
    forced = config.raw("MMAEMU_CPU_SIMD") or "auto"
    try:
        pick = executors.simd_kernel(512, 5760)[0]
    except Exception as e:   # MMAEMU_CPU_SIMD names a kernel this CPU lacks
        pick = f"none: {e}"
    return dict(name="cpu", device="cpu", available=True,
                reason=f"the fast exact CPU kernel; SIMD kernels here: {', '.join(kernels)}; "
                       f"MMAEMU_CPU_SIMD={forced}; per GEMM the kernel with the least time for "
                       f"its padded tiles (512 x 5760: cpu:{pick}); {speed}"
                       + (f"; {notes}" if notes else "") + f"; {_C.cpu_a_pass()}; "
                       f"{torch.get_num_threads()} threads",
                presets=list(KERNELS["reference"].presets), gated=False, exact=True,
                auto_for=list(executors.PRIORITY), load=None)


def status(device=None):
    """Every executor with available / unavailable and the reason, per CUDA device (or for the
    CPU when there is none). A list of dicts: name, device, available, reason, presets, gated,
    exact, auto_for (the presets for which backend="auto" takes it now, among kernels whose
    verdict is stored; no self-test runs here), load (how its module was loaded)."""
    rows = [dict(name="reference", device="cpu", available=True,
                 reason="the scalar C model, on the CPU",
                 presets=list(KERNELS["reference"].presets),
                 gated=False, exact=True, auto_for=[], load=None),
            cpu_status()]
    if device is None:
        devices = list(range(device_count()))
    else:
        devices = [device.index if isinstance(device, torch.device) else int(device)]
    if not devices:
        why = "CUDA disabled by MMAEMU_DISABLE_CUDA" if cuda_disabled() else driver_status()
        for name, k in KERNELS.items():
            if name != "reference":
                rows.append(dict(name=name, device=None, available=False, reason=why,
                                 presets=list(k.presets), gated=k.gated, exact=k.exact,
                                 auto_for=[], load=None))
        for name, why_nb in NOT_BUILT.items():
            rows.append(dict(name=name, device=None, available=False, reason=why_nb, presets=["ada"],
                             gated=True, exact=False, auto_for=[], load=None))
        return rows
    for dev in devices:
        auto = {}
        for preset, order in executors.PRIORITY.items():
            for name in order:
                if name in NOT_BUILT or static_reason(name, dev, preset) or gate_reason(name, dev):
                    continue
                v = facts.verdict(name, preset, dev)
                if v is None or not v["passed"]:    # auto takes a kernel after its self-test
                    continue
                auto[preset] = name
                break
        for name, k in KERNELS.items():
            why = static_reason(name, dev)
            gate = None if why else gate_reason(name, dev)
            load = kernel_check(dev, name)[1] if why is None else None
            verdicts = ({p: facts.verdict(name, p, dev) for p in k.presets} if why is None else {})
            failed = [p for p, v in verdicts.items() if v is not None and not v["passed"]]
            reason = why or gate or ("failed its self-test for " + ", ".join(failed) if failed else
                                     "loaded: " + load)
            rows.append(dict(name=executors.cuda_executor(name), device=dev, available=why is None,
                             reason=reason, presets=list(k.presets), gated=k.gated, exact=k.exact,
                             auto_for=[p for p, n in auto.items() if n == name], load=load,
                             selftest={p: (None if v is None else v["passed"]) for p, v in verdicts.items()}))
        for name, why_nb in NOT_BUILT.items():
            rows.append(dict(name=name, device=dev, available=False, reason=why_nb, presets=["ada"],
                             gated=True, exact=False, auto_for=[], load=None))
    return rows


# --------------------------------------------------------------------------------------------
# Reports (printed by __main__.py)

def _device_name(device):
    return "-" if device is None else (device if isinstance(device, str) else f"cuda:{device}")


def environment_report():
    """(lines, ok): every environment variable mmaemu reads (mmaemu/runtime/config.py), its value and
    whether it is accepted; a profile or backend name is also checked against the known ones."""
    lines, ok = ["Environment (mmaemu/runtime/config.py):"], True
    for name, value, accepted, text in config.report():
        if accepted and value and name == "MMAEMU_PROFILE" and value not in profiles():
            accepted, text = False, f"unknown profile {value!r}; known: {', '.join(profiles())}"
        if accepted and value and name == "MMAEMU_BACKEND" and value not in BACKEND_NAMES:
            accepted, text = False, (f"unknown backend {value!r}; known: "
                                     f"{', '.join(BACKEND_NAMES)}")
        state = "unset" if value is None else ("accepted" if accepted else "NOT ACCEPTED")
        shown = "" if value is None else f"={value}"
        lines.append(f"  {name + shown:34s} {state:12s} {text}")
        ok = ok and accepted
    return lines, ok


def info_report():
    """(lines, ok) of `python -m mmaemu info`: versions, CPU and CUDA devices, the environment
    variables, profiles, the driver and NVRTC, every backend's status with the reason, and the
    presets; ok is False when an environment variable is not accepted."""
    env_lines, env_ok = environment_report()
    lines = [f"mmaemu {__version__}  torch {torch.__version__}  python {platform.python_version()}",
             f"CPU: {facts.cpu_name()} ({os.cpu_count()} logical cores, torch threads {torch.get_num_threads()})"]
    if cuda_disabled():
        lines.append("CUDA: disabled by MMAEMU_DISABLE_CUDA")
    elif torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            lines.append(f"CUDA device {i}: {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs")
    else:
        lines.append("CUDA: no GPU visible to torch (torch.cuda.is_available() is False)")
    lines += [""] + env_lines
    if not env_ok:
        lines += ["error: an environment variable above is not accepted: mmaemu calls that read "
                  "it raise ValueError"]
        return lines, False
    lines += ["", "Profiles (* = default; matches = this machine is the reference platform):"]
    default = get_profile().name
    for p in profiles().values():
        mark = "*" if p.name == default else " "
        exp = " [experimental]" if p.experimental else ""
        lines.append(f" {mark} {p.name:28s} preset={p.preset:7s} matches={p.matches_device()!s:5s} "
                     f"{p.use}{exp}")
    lines += ["", f"CUDA driver: {driver_status()}", f"NVRTC: {nvrtc_status()[0]}", "",
              "Backends (device, availability, reason; auto = the presets for which backend='auto' takes it):"]
    for row in status():
        state = "available" if row["available"] else "unavailable"
        auto = f" [auto: {', '.join(row['auto_for'])}]" if row.get("auto_for") else ""
        lines.append(f"  {row['name']:11s} {_device_name(row['device']):7s} {state:11s} {row['reason']}{auto}")
    lines += ["", "Presets:"]
    for p in presets().values():
        lines.append(f"  {p.name:7s} {p.maturity:12s} block {p.block}, grid 2^(E-{p.frac}), {p.keep}-bit "
                     f"result; {p.evidence}")
    return lines, True


def selftest_report(force=False):
    """(lines, ok) of `python -m mmaemu selftest`: the CPU checks (selftest.run_cpu), then every
    CUDA kernel's self-test (selftest.selftest); ok when every required result passed."""
    lines, ok = ["CPU:"], True
    for r in selftest.run_cpu():
        lines.append(f"  {'PASS' if r.passed else 'FAIL'}  {r.kernel:12s} {r.preset:7s} {r.device:8s} "
                     f"{r.detail} ({r.seconds:.1f} s)")
        ok = ok and r.passed
    gpu_results = selftest.selftest(force=force)
    if not gpu_results:
        why = ("MMAEMU_DISABLE_CUDA is set" if cuda_disabled()
               else "no CUDA GPU is visible: " + driver_status())
        lines.append(f"No GPU kernels to test ({why}); the CPU backends were checked.")
    else:
        lines.append("CUDA (required = IEEE-exact kernels that load; gated kernels are optional):")
    for r in gpu_results:
        mark = {"passed": "PASS", "failed": "FAIL"}.get(r.status, "----")
        need = "required" if r.required else "optional"
        cached = ", cached verdict" if r.cached else ""
        lines.append(f"  {mark}  {r.kernel:11s} {r.preset:7s} {_device_name(r.device):7s} {need:8s} "
                     f"{r.cases} cases, {r.mismatches} mismatches{cached}: {r.detail}")
        if r.required and not r.passed:
            ok = False
    lines.append("selftest: every required kernel passed" if ok else "selftest: FAILED")
    return lines, ok
