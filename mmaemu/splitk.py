"""Split-K decisions (user guide section 5).

cuBLASLt may cut K into S slices and add their partial sums; which S it picks depends on the
shape, formats, output dtype, accumulation mode, workspace and GPU. A decision comes, in order,
from: an explicit `splitk`; the profile's recorded table; the ws0 rule (never split); a live
query of cuBLASLt's heuristic on the profile's own GPU; an envelope inference of S = 1 where a
recorded bound supports it. Otherwise SplitKUnknownError: mmaemu does not guess.
"""
import json
import os
from dataclasses import dataclass
from typing import Optional

from .errors import ReferenceRejectsError, SplitKUnknownError
from .profiles import Profile, tables_dir

DTYPE_NAMES = {"torch.float32": "f32", "torch.bfloat16": "bf16", "torch.float16": "f16",
               "torch.float8_e4m3fn": "e4m3", "torch.float8_e5m2": "e5m2"}
SCHEMES = ("contiguous", "serial", "pairwise")


@dataclass(frozen=True)
class SplitDecision:
    """How K is split: S slices reduced by `scheme`, where the decision came from."""
    S: Optional[int]
    scheme: str
    source: str  # "explicit", "table", "rule", "live", "envelope", "instruction" or "unknown"
    verified: bool
    table_id: Optional[str]
    note: str

    def __repr__(self):
        return (f"SplitDecision(S={self.S!r}, scheme={self.scheme!r}, source={self.source!r}, "
                f"verified={self.verified!r}, table_id={self.table_id!r},\n"
                f"                      note={self.note!r})")


class SplitTable:
    """One recorded split-K table: rows keyed by shape and setting, an envelope, provenance."""

    def __init__(self, data: dict):
        self.table_id = data["table_id"]
        self.provenance = data.get("provenance", {})
        self.rows = {}
        for r in data.get("rows", []):
            self.rows[_key(r["M"], r["N"], r["K"], r["fmt_a"], r["fmt_b"], r["out_dtype"],
                           bool(r["fast_accum"]))] = r
        env = data.get("envelope") or {}
        self.bounds = env.get("bounds", [])
        self.envelope_validated = bool(env.get("validated", False))
        self.envelope_note = env.get("note", "")

    def row(self, M, N, K, fmt_a, fmt_b, out_dtype, fast):
        return self.rows.get(_key(M, N, K, fmt_a, fmt_b, out_dtype, fast))

    def bound(self, K, fmt_a, fmt_b, out_dtype, fast):
        """The largest M*N that can still split at this K and setting, if recorded."""
        for b in self.bounds:
            if not _setting_matches(b, fmt_a, fmt_b, out_dtype, fast):
                continue
            if "K" in b and b["K"] == K:
                return b["max_split_mn"]
            if "K_min" in b and b["K_min"] <= K <= b.get("K_max", float("inf")):
                return b["max_split_mn"]
        return None


def _key(M, N, K, fmt_a, fmt_b, out_dtype, fast):
    return (int(M), int(N), int(K), fmt_a, fmt_b, out_dtype, bool(fast))


def _setting_matches(bound, fmt_a, fmt_b, out_dtype, fast):
    return all(bound.get(k, v) == v for k, v in
               (("fmt_a", fmt_a), ("fmt_b", fmt_b), ("out_dtype", out_dtype), ("fast_accum", fast)))


_TABLES = {}


def register_table(data: dict) -> SplitTable:
    """Adds (or replaces) a split-K table given as the JSON object of tables/splitk/*.json."""
    t = SplitTable(data)
    _TABLES[t.table_id] = t
    return t


def get_table(table_id: str) -> SplitTable:
    if table_id not in _TABLES:
        path = tables_dir() / "splitk" / f"{table_id}.json"
        try:
            with open(path) as f:
                data = json.load(f)
        except FileNotFoundError:
            raise SplitKUnknownError(f"split-K table {table_id!r} is missing ({path})") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise SplitKUnknownError(f"split-K table {table_id!r} is corrupted ({path}: {e})") from None
        try:
            register_table(data)
        except (KeyError, TypeError, AttributeError) as e:
            raise SplitKUnknownError(f"split-K table {table_id!r} is malformed ({path}: {e!r})") from None
    return _TABLES[table_id]


def parse_splitk(splitk, profile: Profile):
    """Checks a `splitk` argument: "auto", 1, or (S, scheme) with a scheme of the profile."""
    if isinstance(splitk, str):
        if splitk != "auto":
            raise ValueError(f"splitk must be 'auto', 1 or (S, scheme); got {splitk!r}")
        return None
    if isinstance(splitk, bool):
        raise TypeError("splitk must be 'auto', 1 or (S, scheme); got a bool")
    if isinstance(splitk, int):
        if splitk != 1:
            raise ValueError(f"splitk={splitk}: give a split as (S, scheme), e.g. "
                             f"({splitk}, {profile.split_schemes[0]!r}); an int may only be 1")
        return 1, "none"
    if isinstance(splitk, (tuple, list)):
        if len(splitk) != 2 or isinstance(splitk[0], bool) or not isinstance(splitk[0], int) \
                or not isinstance(splitk[1], str):
            raise TypeError(f"splitk must be (S: int, scheme: str); got {splitk!r}")
        S, scheme = splitk
        if S < 1 or S > 65536:
            raise ValueError(f"splitk S must be in [1, 65536]; got {S}")
        if scheme not in profile.split_schemes:
            raise ValueError(f"split scheme {scheme!r} is not one of profile {profile.name!r}'s "
                             f"schemes {profile.split_schemes}")
        return (1, "none") if S == 1 else (S, scheme)
    raise TypeError(f"splitk must be 'auto', 1 or (S, scheme); got {type(splitk).__name__}")


def _live_query(profile, M, N, K, fmt_a, fmt_b, out_dtype, fast):
    """cuBLASLt's own heuristic, only on the profile's GPU (None where it cannot be asked)."""
    try:
        from . import _cublaslt
    except ImportError:
        return None
    try:
        if not profile.matches_device():
            return None
        return _cublaslt.query_split(profile, M, N, K, fmt_a, fmt_b, out_dtype, fast)
    except Exception:  # the query is an optimisation: any failure means "not available"
        return None


def decide(profile: Profile, M, N, K, fmt_a, fmt_b, out_dtype, fast, splitk="auto"):
    """The split decision and the warnings it carries, as (SplitDecision, [(category, msg)])."""
    explicit = parse_splitk(splitk, profile)
    if explicit is not None:
        S, scheme = explicit
        if S == 1:
            return SplitDecision(1, "none", "explicit", True, None, "splitk=1 passed by the caller"), []
        note = (f"splitk=({S}, {scheme!r}) passed by the caller; the reduction order of this scheme "
                "is inferred, not replayed on hardware")
        return SplitDecision(S, scheme, "explicit", False, None, note), [("UnverifiedSplitWarning", note)]

    if profile.split_rule == "instruction":
        return SplitDecision(1, "none", "instruction", False, None,
                             "experimental profile: no library, one chain of instructions over K"), []

    table = get_table(profile.splitk_table) if profile.splitk_table else None
    if table is not None:
        row = table.row(M, N, K, fmt_a, fmt_b, out_dtype, fast)
        if row is not None and row.get("splits") is None:
            # cuBLASLt offered no algorithm for this shape on the reference platform
            raise ReferenceRejectsError(
                f"the reference platform of profile {profile.name!r} cannot run M={M}, N={N}, "
                f"K={K} ({fmt_a} x {fmt_b} -> {out_dtype}): table {table.table_id} records "
                f"{row.get('note') or 'no algorithm offered'}")
        if row is not None:
            S = int(row["splits"])
            scheme = row.get("scheme", "none") if S > 1 else "none"
            verified = bool(row.get("verified", S == 1))
            note = row.get("note") or "table row"
            warns = [] if verified else [("UnverifiedSplitWarning",
                                          f"split S={S} ({scheme}) from table {table.table_id}: "
                                          "its reduction was never replayed on hardware")]
            return SplitDecision(S, scheme, "table", verified, table.table_id, note), warns

    if profile.split_rule == "never":
        return SplitDecision(1, "none", "rule", True, None,
                             f"profile {profile.name!r} has no cuBLAS workspace: cuBLASLt never splits K"), []

    live = _live_query(profile, M, N, K, fmt_a, fmt_b, out_dtype, fast)
    if live is not None:
        S, scheme, note = live
        return SplitDecision(S, scheme if S > 1 else "none", "live", S == 1, None, note), []

    if table is not None and os.environ.get("MMAEMU_SPLITK_STRICT") != "1":
        bound = table.bound(K, fmt_a, fmt_b, out_dtype, fast)
        if bound is not None and M * N > bound:
            note = (f"inferred: M*N = {M * N} is above the envelope bound {bound} for K = {K} "
                    f"({table.envelope_note})" if table.envelope_note else
                    f"inferred: M*N = {M * N} is above the envelope bound {bound} for K = {K}")
            warns = []
            if not table.envelope_validated:
                warns.append(("UnvalidatedEnvelopeWarning",
                              f"S = 1 inferred for M={M}, N={N}, K={K} by the envelope of table "
                              f"{table.table_id}, which failed its held-out test; pass splitk if you "
                              "know the reference GPU's split"))
            return SplitDecision(1, "none", "envelope", False, table.table_id, note), warns

    schemes = " or ".join(f"(S, {s!r})" for s in profile.split_schemes)
    where = f"table {table.table_id}" if table is not None else "no table"
    strict = " (MMAEMU_SPLITK_STRICT=1 is set)" if os.environ.get("MMAEMU_SPLITK_STRICT") == "1" else ""
    raise SplitKUnknownError(
        f"the split-K decision of profile {profile.name!r} is unknown for M={M}, N={N}, K={K} "
        f"({fmt_a} x {fmt_b} -> {out_dtype}, use_fast_accum={fast}; {where}){strict}. Pass "
        f"splitk=1 if the reference GPU does not split this shape, or splitk={schemes} with its "
        f"split, or record the shape on the profile's GPU ({profile.gpu}) with "
        "scripts/record_heuristics.py.")
