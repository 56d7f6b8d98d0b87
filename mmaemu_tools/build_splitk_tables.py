#!/usr/bin/env python3
"""Writes the six profiles' split-K tables (tables/splitk/<table_id>.json) from the vendored data.

tables/splitk/mmaemu-0.1.0/ holds, unchanged, the cuBLASLt heuristic decisions that mmaemu 0.1.0
published (Apache-2.0, see its NOTICE): one npz per GPU with every workspace, a metadata JSON
(provenance, envelope, split rule) and the list of split reductions replayed on hardware. Each
table written here selects one workspace of one GPU's npz (rows stay in the npz, read lazily by
mmaemu/planning/splitk.py) and carries its provenance and its envelope in the form the loader reads:

  H100 ("k_grid"): S = 1 when M*N > B(setting, K) for K_min <= K <= K_max, K rounded up to the
      grid; B copied from the metadata's envelope, `validated` from its sealed held-out test.
  RTX 4060 ("setting"): S = 1 when M*N > B(setting) = 2 x the largest M*N that split in the table
      for the setting (user guide section 5), computed here from the npz.
  ws0 tables: no envelope; the profiles' "never" rule decides shapes off the table.

Usage:  python -m mmaemu_tools.build_splitk_tables [--check]   (--check: fail if a table would change)
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPLITK = os.path.join(ROOT, "tables", "splitk")
VENDOR = "mmaemu-0.1.0"
OUT_NAMES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16",
             "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
MIB = 1 << 20

GPUS = {
    "h100pcie": {"stem": "heur_h100pcie_lt12.8.3.14",
                 "combos": "verified_split_combos_h100pcie_lt12.8.3.14.json",
                 "combos_origin": "verified_split_combos_h100pcie_lt12.8.3.14.json"},
    "rtx4060": {"stem": "heur_rtx4060_lt12.8.3.14",
                "combos": "verified_split_combos_rtx4060_lt12.8.3.14.json",
                "combos_origin": "verified_split_combos.json"},
}
# (table_id, gpu, workspace, caller): the profiles of tables/profiles.json
TABLES = [
    ("heur_h100pcie_lt12.8.3.14", "h100pcie", 1 * MIB, "torch 2.7.1 torch._scaled_mm"),
    ("heur_h100pcie_lt12.8.3.14_ws32m", "h100pcie", 32 * MIB, "Transformer Engine 2.3"),
    ("heur_h100pcie_lt12.8.3.14_ws0", "h100pcie", 0, "cuBLASLt with CUBLASLT_WORKSPACE_SIZE=0"),
    ("heur_rtx4060_lt12.8.3.14", "rtx4060", 1 * MIB, "torch 2.7.1 torch._scaled_mm"),
    ("heur_rtx4060_lt12.8.3.14_ws4m", "rtx4060", 4 * MIB, "Transformer Engine 2.3"),
    ("heur_rtx4060_lt12.8.3.14_ws0", "rtx4060", 0, "cuBLASLt with CUBLASLT_WORKSPACE_SIZE=0"),
]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def setting_of(s):
    return {"fmt_a": s["fmt_a"], "fmt_b": s["fmt_b"], "out_dtype": OUT_NAMES[s["out"]],
            "fast_accum": bool(s["fast"])}


def k_grid_envelope(meta, ws):
    env = meta["envelope"]
    check = env["validation"][str(ws)]
    bounds = [dict(setting_of(b), B=b["B"]) for b in env["bounds"] if b["ws"] == ws]
    return {"kind": "k_grid", "K_grid": env["K_grid"], "K_min": env["K_min"], "K_max": env["K_max"],
            "bounds": bounds, "validated": check["status"] == "validated",
            "held_out": {"tested": check["tested"], "split_above_bound": check["split_above_bound"],
                         "failures": check["failures"]},
            "basis": f"sealed held-out test of the bound: {check['tested']} shapes above it, "
                     f"{check['split_above_bound']} split ({check['status']})",
            "note": env["note"]}


def setting_envelope(cols, ws_code, codes):
    sel = (cols["ws"] == ws_code) & (cols["splitK"] > 1)
    mn = cols["M"][sel].astype(np.int64) * cols["N"][sel]
    bounds = []
    keys = np.stack([cols[c][sel] for c in ("fa", "fb", "out", "fast")], axis=1)
    for key in sorted({tuple(int(v) for v in k) for k in keys}):
        fa, fb, out, fast = key
        m = (keys == np.array(key)).all(axis=1)
        largest = int(mn[m].max())
        bounds.append({"fmt_a": codes["fa/fb"][str(fa)], "fmt_b": codes["fa/fb"][str(fb)],
                       "out_dtype": OUT_NAMES[codes["out"][str(out)]], "fast_accum": bool(fast),
                       "max_split_mn": largest, "B": 2 * largest})
    return {"kind": "setting", "bounds": bounds, "validated": True,
            "basis": "the user guide's rule for the RTX 4060 (section 5)",
            "note": "B = 2 x the largest M*N that split in this table for the setting (user guide "
                    "section 5, which reports cuBLASLt splitting shapes up to 1.27 times that M*N "
                    "off the table); the vendored data holds no held-out record of this bound"}


def build(table_id, gpu, ws, caller):
    g = GPUS[gpu]
    npz = os.path.join(SPLITK, VENDOR, g["stem"] + ".npz")
    meta_path = os.path.join(SPLITK, VENDOR, g["stem"] + ".meta.json")
    with open(meta_path) as f:
        meta = json.load(f)
    cols = dict(np.load(npz))
    codes = meta["codes"]
    ws_code = codes["ws"].index(ws)
    in_ws = cols["ws"] == ws_code
    dev = meta["profile_device"]
    prov = {
        "gpu": dev["gpu"], "sm_count": dev["sm_count"],
        "compute_capability": ".".join(str(c) for c in dev["capability"]),
        "driver": dev["driver"], "cublaslt_version": dev["cublaslt"], "torch": dev["torch"],
        "workspace_bytes": ws, "caller": caller, "descriptor": meta["descriptor"],
        "recorded_with": "cublasLtMatmulAlgoGetHeuristic, requestedAlgoCount 1",
        "source": f"mmaemu 0.1.0 (Apache-2.0; tables/splitk/{VENDOR}/NOTICE): table "
                  f"{meta['table_id']}, workspace {ws} bytes",
        "source_files": [{"path": f"{VENDOR}/{os.path.basename(p)}", "sha256": sha256(p)}
                         for p in (npz, meta_path)],
        "upstream_sources": [{k: s[k] for k in ("id", "sha256") if k in s} for s in meta["sources"]],
    }
    if ws == 0:
        prov["workspace0_note"] = meta.get("workspace0_note",
                                           "no split among this table's workspace-0 rows")
    doc = {
        "format": "mmaemu-splitk-1",
        "table_id": table_id,
        "provenance": prov,
        "data": {"npz": f"{VENDOR}/{g['stem']}.npz", "sha256": sha256(npz), "ws_code": ws_code,
                 "rows": int(in_ws.sum()), "split_rows": int((in_ws & (cols["splitK"] > 1)).sum()),
                 "codes": {"fa/fb": codes["fa/fb"], "out": codes["out"],
                           "custom -> scheme": codes["custom -> scheme"],
                           "custom -> scheme, unlisted": codes.get("custom -> scheme, unlisted")}},
        "verified_combos": {"path": f"{VENDOR}/{g['combos']}",
                            "sha256": sha256(os.path.join(SPLITK, VENDOR, g["combos"])),
                            "origin": g["combos_origin"]},
        "rows": [],
    }
    if "split_rule" in meta:
        doc["split_rule"] = meta["split_rule"]
    if ws == 0:
        doc["envelope"] = {"bounds": [], "validated": True,
                           "basis": "", "note": "none needed: without a workspace cuBLASLt never splits"}
    elif "envelope" in meta:
        doc["envelope"] = k_grid_envelope(meta, ws)
    else:
        doc["envelope"] = setting_envelope(cols, ws_code, codes)
    return doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if a written table would change")
    args = ap.parse_args(argv)
    stale = []
    for table_id, gpu, ws, caller in TABLES:
        text = json.dumps(build(table_id, gpu, ws, caller), indent=1) + "\n"
        path = os.path.join(SPLITK, table_id + ".json")
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            stale.append(path)
            if not args.check:
                with open(path, "w") as f:
                    f.write(text)
    if args.check and stale:
        print("stale:", *stale, sep="\n  ")
        return 1
    print(f"{len(TABLES)} tables {'checked' if args.check else 'written'}; changed: {len(stale)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
