#!/usr/bin/env python3
"""Turns one H200 ground-truth run (scripts/h200_ground_truth.sh) into repository data.

    python -m mmaemu_tools.ingest_h200 OUT_DIR [--repo DIR] [--dry-run] [--force] [--allow-dry-run]

OUT_DIR holds what the run returned: ground_truth.tar.gz (goldens/, tables/, probes/, logs/),
summary.txt and probes*.json. The script
  1. unpacks the tarball (members that would land outside the target are refused) and copies
     goldens/*.json to test/data/hw_goldens/ and tables/*.json to tables/splitk/;
  2. adds the run's GPU's profiles to tables/profiles.json, named after it (gpu_stem of the
     tables' device name and SM count: h200, h200-te, h200-ws0 on an H200; h100-sxm, ... on an
     H100 SXM), every field taken from the tables' provenance or copied from the matching hopper
     profile (preset, schemes, rule, the caller's name for TE and ws0); a missing field stops
     the script;
  3. writes a Markdown table of the probe verdicts to stdout and OUT_DIR/probe_table.md;
  4. prints what it did and the commands to run next.
Existing files with other contents are never overwritten without --force. Data from a dry run
(the CPU model) is refused unless --allow-dry-run, and never lands in this repository.
--dry-run shows what would be done and writes nothing into the repository.
"""
import argparse
import json
import os
import shutil
import sys
import tarfile
import tempfile

HERE_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# caller recorded by record_heuristics.py -> (the new profile's suffix after the GPU's stem,
# the hopper profile it mirrors)
CALLERS = {"torch": ("", "hopper"), "te": ("-te", "hopper-te"), "ws0": ("-ws0", "hopper-ws0")}
# the loader (mmaemu/planning/splitk.py) keys rows by mmaemu's dtype names; tables from older
# record_heuristics.py versions have torch's names, so rows are renamed on the way in
OUT_DTYPE_NAMES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


class IngestError(SystemExit):
    """A clear stop: bad or incomplete run data, or a file that would be overwritten."""

    def __init__(self, msg):
        super().__init__(f"ingest_h200: {msg}")


# -- 1. unpack and copy ---------------------------------------------------------------------

def safe_extract(tarball, dest):
    """Extracts regular files and folders only, each inside dest (no .., absolute paths, links)."""
    root = os.path.realpath(dest)
    with tarfile.open(tarball) as tf:
        for m in tf.getmembers():
            target = os.path.realpath(os.path.join(root, m.name))
            if os.path.commonpath([root, target]) != root:
                raise IngestError(f"{tarball}: member {m.name!r} would land outside {dest}")
            if not (m.isfile() or m.isdir()):
                raise IngestError(f"{tarball}: member {m.name!r} is not a plain file or folder")
        for m in tf.getmembers():
            if m.isdir():
                os.makedirs(os.path.join(root, m.name), exist_ok=True)
            else:
                os.makedirs(os.path.dirname(os.path.join(root, m.name)), exist_ok=True)
                with tf.extractfile(m) as src, open(os.path.join(root, m.name), "wb") as dst:
                    shutil.copyfileobj(src, dst)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise IngestError(f"cannot read {path}: {e}") from None


def read_run(work):
    """The run's goldens, tables and probe files as {name: (path, document)}."""
    run = {}
    for kind in ("goldens", "tables", "probes"):
        folder = os.path.join(work, kind)
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json")) if os.path.isdir(folder) else []
        run[kind] = {n: (os.path.join(folder, n), load_json(os.path.join(folder, n))) for n in names}
    if not run["goldens"] and not run["tables"]:
        raise IngestError(f"no goldens/*.json and no tables/*.json in the tarball ({work})")
    return run


def is_dry(kind, doc):
    if kind == "tables":
        return "SYNTHETIC" in str(doc.get("provenance", {}).get("source", "")) or \
            str(doc.get("table_id", "")).endswith("_DRYRUN")
    return bool(doc.get("dry_run", doc.get("platform", {}).get("dry_run", True)))


def normalise_table(doc):
    """Renames rows' out_dtype to the loader's names; anything else unknown stops the script."""
    for r in doc.get("rows", []):
        r["out_dtype"] = OUT_DTYPE_NAMES.get(r["out_dtype"], r["out_dtype"])
        if r["out_dtype"] not in ("f32", "bf16", "f16", "e4m3", "e5m2"):
            raise IngestError(f"table {doc.get('table_id')}: unknown out_dtype {r['out_dtype']!r}")
    return doc


def table_text(doc):
    """record_heuristics.py's layout (one row per line), so files stay diff-friendly."""
    head = {k: v for k, v in doc.items() if k != "rows"}
    rows = ",\n".join(json.dumps(r, separators=(",", ":")) for r in doc["rows"])
    return json.dumps(head, indent=1)[:-2] + ',\n "rows": [\n' + rows + "\n ]\n}\n"


def plan_copies(run, repo):
    """(destination, text) for every golden and table; the text is what will be written."""
    plans = []
    for name, (path, _) in run["goldens"].items():
        with open(path) as f:
            plans.append((os.path.join(repo, "test", "data", "hw_goldens", name), f.read()))
    for name, (_, doc) in run["tables"].items():
        if name != f"{doc.get('table_id')}.json":
            raise IngestError(f"table file {name} does not match its table_id {doc.get('table_id')!r}")
        plans.append((os.path.join(repo, "tables", "splitk", name), table_text(normalise_table(doc))))
    return plans


def check_overwrites(plans, force):
    """Same contents: nothing to do; other contents: refused without --force."""
    todo = []
    for dest, text in plans:
        if os.path.exists(dest):
            with open(dest) as f:
                if f.read() == text:
                    continue
            if not force:
                raise IngestError(f"{dest} exists with other contents (use --force to replace it)")
        todo.append((dest, text))
    return todo


# -- 2. profiles ----------------------------------------------------------------------------

def need(prov, key, table_id):
    v = prov.get(key)
    if v is None or v == "" or (key == "gpu" and not str(v).startswith("NVIDIA ")):
        raise IngestError(f"table {table_id}: provenance field {key!r} is missing or not from a GPU "
                          f"({v!r}); cannot build its profile")
    return v


def refuse_split_never_tables(run, existing):
    """Takes out of the run each table whose profile never splits by rule (ws0: mmaemu/planning/splitk.py)
    but whose rows split: that table and its profile are refused, with the evidence; the rest of
    the run goes in. Returns the messages."""
    rules = {p["name"]: p["split_rule"] for p in existing["profiles"]}
    refused = []
    for name, (_, doc) in list(run["tables"].items()):
        caller = doc.get("provenance", {}).get("caller")
        if caller not in CALLERS or rules.get(CALLERS[caller][1]) != "never":
            continue
        split = [r for r in doc.get("rows", []) if (r.get("splits") or 1) > 1]
        if split:
            del run["tables"][name]
            refused.append(f"table {doc.get('table_id')} REFUSED (not copied, no profile for caller "
                           f"{caller!r}): {len(split)} of {len(doc.get('rows', []))} rows split with no "
                           f"workspace, e.g. {json.dumps(split[0])}; the never-split rule of "
                           f"{CALLERS[caller][1]} does not hold here: fix the model, then ingest again")
    return refused


def build_profiles(run, existing, refused_callers=()):
    """The run's GPU's three profiles (stem, stem-te, stem-ws0), from the tables' provenance and
    the hopper profiles' constants."""
    from ._hwcommon import gpu_stem
    by_caller = {}
    for _, doc in run["tables"].values():
        caller = doc.get("provenance", {}).get("caller")
        if caller in by_caller:
            raise IngestError(f"two tables for caller {caller!r}")
        by_caller[caller] = doc
    missing = [c for c in CALLERS if c not in by_caller and c not in refused_callers]
    if missing:
        raise IngestError(f"no split-K table for caller(s) {missing} (tables' provenance 'caller'); "
                          "rerun mmaemu_tools/record_heuristics.py --caller ... for them")
    hopper = {p["name"]: p for p in existing["profiles"]}
    # the preset is hopper's (sm_90): a recorded compute capability must agree
    capability = hopper["hopper"]["compute_capability"]
    for kind in ("goldens", "probes"):
        for name, (_, doc) in run[kind].items():
            cap = doc.get("platform", {}).get("capability")
            if cap is not None and cap != capability:
                raise IngestError(f"{kind}/{name} was recorded on compute capability {cap}, "
                                  f"not {capability}: the hopper preset does not apply")
    out, stems = [], set()
    for caller, (suffix, model) in CALLERS.items():
        if caller not in by_caller:
            continue                      # refused above, with its evidence
        doc, base = by_caller[caller], hopper[model]
        tid, prov = doc.get("table_id"), doc.get("provenance", {})
        gpu = need(prov, "gpu", tid)
        short = gpu[len("NVIDIA "):]
        sm, lt, ws = need(prov, "sm_count", tid), need(prov, "cublaslt_version", tid), need(prov, "workspace_bytes", tid)
        stems.add(gpu_stem(gpu, sm))
        if len(stems) > 1:
            raise IngestError(f"the tables come from different GPUs: {sorted(stems)}")
        name = gpu_stem(gpu, sm) + suffix
        if ws != base["workspace_bytes"]:
            raise IngestError(f"table {tid}: workspace {ws} bytes, but {model} (caller {caller}) uses "
                              f"{base['workspace_bytes']}")
        desc = (f"torch {need(prov, 'torch', tid)} torch._scaled_mm" if caller == "torch" else base["caller"])
        mib = f"{ws >> 20} MiB workspace"
        use = {"torch": f"torch._scaled_mm on an {short} ({sm} SMs, {mib})",
               "te": f"{desc} on an {short} ({mib})",
               "ws0": f"cuBLAS with CUBLASLT_WORKSPACE_SIZE=0 on an {short} (never splits)"}[caller]
        out.append({"name": name, "gpu": gpu, "gpu_match": short,
                    "compute_capability": capability, "sm_count": sm,
                    "cublaslt_version": lt, "caller": desc, "workspace_bytes": ws,
                    "preset": base["preset"], "splitk_table": None if base["split_rule"] == "never" else tid,
                    "split_rule": base["split_rule"], "split_schemes": list(base["split_schemes"]),
                    "experimental": False, "use": use})
    return out


def merge_profiles(existing, new, force):
    """existing with `new` added after the last hopper profile; a different same-name profile
    is refused without --force. Returns (document, names changed)."""
    profs = list(existing["profiles"])
    changed = []
    for p in new:
        old = next((i for i, q in enumerate(profs) if q["name"] == p["name"]), None)
        if old is not None:
            if profs[old] == p:
                continue
            if not force:
                raise IngestError(f"profile {p['name']!r} exists in tables/profiles.json with other "
                                  f"fields (use --force to replace it)")
            profs[old] = p
        else:
            last = max(i for i, q in enumerate(profs) if q["preset"] == "hopper"
                       and not q["experimental"])
            profs.insert(last + 1, p)
        changed.append(p["name"])
    return {**existing, "profiles": profs}, changed


PROFILE_LINES = (("name", "default", "gpu", "gpu_match", "compute_capability", "sm_count"),
                 ("cublaslt_version", "caller", "workspace_bytes"),
                 ("preset", "splitk_table", "split_rule", "split_schemes"),
                 ("experimental", "use"))


def profiles_text(doc):
    """tables/profiles.json's hand layout: four lines per profile (test: round-trips the file)."""
    def line(p, keys):
        return ", ".join(f"{json.dumps(k)}: {json.dumps(p[k])}" for k in keys if k in p)
    for p in doc["profiles"]:
        unknown = set(p) - {k for keys in PROFILE_LINES for k in keys}
        if unknown:
            raise IngestError(f"profile {p['name']!r}: fields {sorted(unknown)} have no place in the layout")
    head = {k: v for k, v in doc.items() if k != "profiles"}
    items = ",\n".join("    {" + ",\n     ".join(line(p, keys) for keys in PROFILE_LINES) + "}"
                       for p in doc["profiles"])
    return json.dumps(head, indent=2)[:-2] + ',\n  "profiles": [\n' + items + "\n  ]\n}\n"


def validate_with_loader(text, tables):
    """What mmaemu's loaders do with the new data: Profile(**fields), SplitTable(document)."""
    try:
        from mmaemu.planning.profiles import Profile
        from mmaemu.planning.splitk import SplitTable
    except ImportError as e:
        raise IngestError(f"cannot import mmaemu to check the profiles ({e}); build it first") from None
    for p in json.loads(text)["profiles"]:
        Profile(**{**p, "split_schemes": tuple(p["split_schemes"])})
    for doc in tables:
        try:
            SplitTable(doc)
        except (KeyError, TypeError, AttributeError) as e:
            raise IngestError(f"table {doc.get('table_id')} does not load: {e!r}") from None


# -- 3. probe table -------------------------------------------------------------------------

def score_lines(res, limit=3):
    """'where: hypothesis n' for the score dicts ({hypothesis: elements matched}) of a result."""
    out = []

    def walk(where, d, depth):
        if not isinstance(d, dict) or depth > 3 or len(out) >= limit:
            return
        if depth and d and all(type(v) is int for v in d.values()):
            best = max(d, key=d.get)
            out.append(f"{where or 'matched'}: {best} {d[best]}")
            return
        for k, v in d.items():
            walk(where if k == "matches" else k, v, depth + 1)
    walk("", res, 0)
    return out


def evidence(probe):
    """A short reading of a probe's record; the JSON file has the full result."""
    res = probe.get("result") or {}
    parts = []
    if probe.get("matching_hypotheses"):
        parts.append("matches: " + ", ".join(probe["matching_hypotheses"]))
    if "vectors" in res:
        parts.append(f"vectors: {res['vectors']}")
    parts += score_lines(res)
    for key in ("differences", "ctypes_vs_trace", "reason", "error", "note"):
        for where in (res, probe):
            if key in where:
                parts.append(f"{key}: {str(where[key]).splitlines()[0][:160]}")
                break
    if not parts and probe.get("hypothesis_detail"):
        parts.append(probe["hypothesis_detail"])
    return "; ".join(parts) or "see the JSON record"


def probe_table(run):
    rows = ["| id | file | hypothesis | verdict | evidence |", "|---|---|---|---|---|"]
    for name, (_, doc) in run["probes"].items():
        src = "DRY RUN" if doc.get("dry_run") else doc.get("platform", {}).get("gpu", "?")
        for p in doc.get("probes", []):
            cells = [p.get("id", "?"), f"{name} ({src})", p.get("hypothesis", ""),
                     str(p.get("verdict", "?")), evidence(p)]
            rows.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    if len(rows) == 2:
        rows.append("| - | - | no probes*.json in the run | - | - |")
    return "\n".join(rows) + "\n"


# -- main -----------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", help="the run's OUT folder (ground_truth.tar.gz inside)")
    ap.add_argument("--repo", default=HERE_REPO, help="repository to ingest into (default: this one)")
    ap.add_argument("--dry-run", action="store_true", help="show what would be done, write nothing")
    ap.add_argument("--force", action="store_true", help="replace existing files/profiles that differ")
    ap.add_argument("--allow-dry-run", action="store_true",
                    help="accept a rehearsal's CPU-model data (never into this repository)")
    args = ap.parse_args(argv)
    tarball = os.path.join(args.out_dir, "ground_truth.tar.gz")
    if not os.path.isfile(tarball):
        raise IngestError(f"{tarball} not found")
    repo = os.path.abspath(args.repo)
    with tempfile.TemporaryDirectory(prefix="ingest_h200_") as work:
        safe_extract(tarball, work)
        run = read_run(work)
        dry = [f"{k}/{n}" for k in ("goldens", "tables") for n, (_, d) in run[k].items() if is_dry(k, d)]
        if dry and (not args.allow_dry_run or os.path.realpath(repo) == os.path.realpath(HERE_REPO)):
            raise IngestError(f"dry-run (CPU model) data, not hardware: {dry}; such data goes only into "
                              "another --repo, with --allow-dry-run")
        prof_path = os.path.join(repo, "tables", "profiles.json")
        existing = load_json(prof_path)
        tables_before = {n: d.get("provenance", {}).get("caller") for n, (_, d) in run["tables"].items()}
        refused = refuse_split_never_tables(run, existing)
        refused_callers = [c for n, c in tables_before.items() if n not in run["tables"]]
        plans = plan_copies(run, repo)
        copies = check_overwrites(plans, args.force)
        new = build_profiles(run, existing, refused_callers)
        names = [p["name"] for p in new]
        merged, changed = merge_profiles(existing, new, args.force)
        text = profiles_text(merged)
        validate_with_loader(text, [doc for _, doc in run["tables"].values()])
        table = probe_table(run)

    verb = "would write" if args.dry_run else "wrote"
    if not args.dry_run:
        for dest, body in copies:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "w") as f:
                f.write(body)
        if changed:
            with open(prof_path, "w") as f:
                f.write(text)
        with open(os.path.join(args.out_dir, "probe_table.md"), "w") as f:
            f.write(table)
    print(table)
    for msg in refused:
        print(msg)
    for dest, _ in copies:
        print(f"{verb} {os.path.relpath(dest, repo)}")
    print(f"{verb} profiles {', '.join(changed)} in tables/profiles.json" if changed
          else f"profiles {', '.join(names)} already present and identical")
    skipped = len(plans) - len(copies)
    if skipped:
        print(f"{skipped} file(s) already present with the same contents")
    print(f"{verb} {os.path.join(args.out_dir, 'probe_table.md')} (paste into docs/hardware_validation.md)")
    print("next:\n"
          f"  cd {repo}\n"
          "  python -m pytest -q test/test_hw_goldens.py test/test_guide_api.py\n"
          f"  python -c \"import mmaemu; print(mmaemu.get_profile('{names[0] if names else 'h200'}'))\"\n"
          "  git add test/data/hw_goldens tables/splitk tables/profiles.json && git status\n"
          "  then fill the Results table of docs/hardware_validation.md from summary.txt and probe_table.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
