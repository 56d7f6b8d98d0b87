"""Split-K decisions (user guide section 5).

cuBLASLt may cut K into S slices and add their partial sums; which S it picks depends on the
shape, formats, output dtype, accumulation mode, workspace and GPU. A decision comes, in order,
from: an explicit `splitk`; the profile's recorded table; the ws0 rule (never split); an
envelope inference of S = 1 where a recorded bound supports it (docs/splitk_tables.md). Only
recorded facts are read: asking cuBLASLt itself is a tool's job on the profile's GPU
(mmaemu_tools/record_heuristics.py), whose rows join the table. Otherwise SplitKUnknownError: mmaemu does
not guess, unless the caller opts in to the stated inference of mmaemu/planning/splitk_infer.py
(`splitk="infer"`, or MMAEMU_SPLITK=infer for `"auto"`), which always decides and says what
backs it. The tables themselves are mmaemu/planning/splitk_table.py's.
"""
import json
from dataclasses import dataclass
from typing import Optional

from ..runtime import config
from ..errors import ReferenceRejectsError, SplitKUnknownError
from .profiles import Profile, tables_dir
from .splitk_table import SplitTable, TableDataError, setting_text



@dataclass(frozen=True)
class SplitDecision:
    """How K is split: S slices reduced by `scheme`, where the decision came from."""
    S: Optional[int]
    scheme: str
    source: str  # "explicit", "table", "rule", "envelope", "inferred", "instruction", "unknown"
    verified: bool
    table_id: Optional[str]
    note: str

    def __repr__(self):
        return (f"SplitDecision(S={self.S!r}, scheme={self.scheme!r}, source={self.source!r}, "
                f"verified={self.verified!r}, table_id={self.table_id!r},\n"
                f"                      note={self.note!r})")


_TABLES = {}


def register_table(data: dict, base=None) -> SplitTable:
    """Adds (or replaces) a split-K table given as the JSON object of tables/splitk/*.json;
    `base` is the folder its data files are relative to (default tables/splitk)."""
    t = SplitTable(data, base)
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
            register_table(data, path.parent)
        except (KeyError, TypeError, AttributeError) as e:
            raise SplitKUnknownError(f"split-K table {table_id!r} is malformed ({path}: {e!r})") from None
    return _TABLES[table_id]


MODES = ("auto", "infer")
_FORMS = "'auto', 'infer', 1 or (S, scheme)"


def parse_splitk(splitk, profile: Profile):
    """Checks a `splitk` argument: "auto", "infer", 1, or (S, scheme) with a scheme of the
    profile. Returns None for "auto" and "infer" (splitk_mode tells them apart), else (S, scheme)."""
    if isinstance(splitk, str):
        if splitk not in MODES:
            raise ValueError(f"splitk must be {_FORMS}; got {splitk!r}")
        return None
    if isinstance(splitk, bool):
        raise TypeError(f"splitk must be {_FORMS}; got a bool")
    if isinstance(splitk, int):
        if splitk != 1:
            example = f"({splitk}, {profile.split_schemes[0]!r})" if splitk > 1 and profile \
                else "(S, scheme) with S >= 2"
            raise ValueError(f"splitk={splitk}: an int may only be 1 (no split); give a split as "
                             f"{example}")
        return 1, "none"
    if isinstance(splitk, (tuple, list)):
        if len(splitk) != 2 or isinstance(splitk[0], bool) or not isinstance(splitk[0], int) \
                or not isinstance(splitk[1], str):
            raise TypeError(f"splitk must be (S: int, scheme: str); got {splitk!r}")
        S, scheme = splitk
        if S < 1 or S > 65536:
            raise ValueError(f"splitk S must be in [1, 65536]; got {S}")
        if S == 1 and scheme == "none":
            return 1, "none"
        if profile is not None and scheme not in profile.split_schemes:
            raise ValueError(f"split scheme {scheme!r} is not one of profile {profile.name!r}'s "
                             f"schemes {profile.split_schemes}" + (" (or 'none' with S = 1)"
                                                                    if S == 1 else ""))
        return (1, "none") if S == 1 else (S, scheme)
    raise TypeError(f"splitk must be {_FORMS}; got {type(splitk).__name__}")


def splitk_mode(splitk) -> str:
    """"infer" for splitk="infer", and for "auto" while MMAEMU_SPLITK=infer; else "auto"."""
    if splitk == "infer":
        return "infer"
    return config.get("MMAEMU_SPLITK") if splitk == "auto" else "auto"


def decide(profile: Profile, M, N, K, fmt_a, fmt_b, out_dtype, fast, splitk="auto"):
    """The split decision and the warnings it carries, as (SplitDecision, [(category, msg)])."""
    explicit = parse_splitk(splitk, profile)
    if explicit is not None:
        S, scheme = explicit
        if S > max(K, 1):
            raise ValueError(f"splitk=({S}, {scheme!r}) has more slices than K = {K} has "
                             "elements; S may be at most K")
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
        row = _table_row(table, M, N, K, fmt_a, fmt_b, out_dtype, fast)
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
        note = (f"profile {profile.name!r} has no cuBLAS workspace: cuBLASLt never splits K"
                + (f" ({table.provenance['workspace0_note']})"
                   if table is not None and "workspace0_note" in table.provenance else ""))
        return SplitDecision(1, "none", "rule", True, None, note), []

    strict = config.get("MMAEMU_SPLITK_STRICT")
    infer = splitk_mode(splitk) == "infer"
    why = "no table"
    if table is not None:
        B, how = table.bound(K, fmt_a, fmt_b, out_dtype, fast)
        if B is not None and M * N > B and not strict:
            basis = f"; {table.envelope_basis}" if table.envelope_basis else ""
            note = (f"inferred by the envelope: M*N = {M * N} > B = {B} (setting "
                    f"{setting_text(fmt_a, fmt_b, out_dtype, fast)}; {how}{basis})")
            warns = []
            if not table.envelope_validated:
                warns.append(("UnvalidatedEnvelopeWarning",
                              f"S = 1 inferred for M={M}, N={N}, K={K} by the envelope of table "
                              f"{table.table_id} (M*N = {M * N} > B = {B}), which failed its "
                              "held-out test; pass splitk if you know the reference GPU's split"))
            return SplitDecision(1, "none", "envelope", False, table.table_id, note), warns
        if B is None:
            why = f"not in table {table.table_id}; no envelope bound: {how}"
        elif M * N > B:
            why = f"not in table {table.table_id}; the envelope (M*N = {M * N} > B = {B}, {how}) is off"
        else:
            why = (f"not in table {table.table_id}; M*N = {M * N} <= B = {B} ({how}): within "
                   "the envelope, the shape may split")

    if infer:
        return inferred(profile, table, M, N, K, fmt_a, fmt_b, out_dtype, fast, why)
    schemes = " or ".join(f"(S, {s!r})" for s in profile.split_schemes)
    strict_text = " (MMAEMU_SPLITK_STRICT is set)" if strict else ""
    raise SplitKUnknownError(
        f"the split-K decision of profile {profile.name!r} is unknown for M={M}, N={N}, K={K} "
        f"({setting_text(fmt_a, fmt_b, out_dtype, fast)}; {why}){strict_text}. Pass "
        f"splitk=1 if the reference GPU does not split this shape, or splitk={schemes} with its "
        f"split, or splitk='infer' (or MMAEMU_SPLITK=infer) to take mmaemu's stated inference, "
        f"or record the shape on the profile's GPU ({profile.gpu}) with "
        "mmaemu_tools/record_heuristics.py.")


def inferred(profile, table, M, N, K, fmt_a, fmt_b, out_dtype, fast, why):
    """The opt-in last step: mmaemu/planning/splitk_infer.py's decision, labelled as inferred."""
    from . import splitk_infer
    if table is None:
        S, scheme, note = 1, "none", (f"inferred: profile {profile.name!r} has no split-K table, "
                                      "so no recording backs any split; S = 1")
    else:
        S, scheme, note = splitk_infer.infer(table, M, N, K, fmt_a, fmt_b, out_dtype, fast)
    warn = (f"split-K S={S}{f' ({scheme})' if S > 1 else ''} for M={M}, N={N}, K={K} on profile "
            f"{profile.name!r} is inferred, not recorded ({why}): {note}")
    return (SplitDecision(S, scheme, "inferred", False, table.table_id if table else None, note),
            [("UnverifiedSplitWarning", warn)])


def _table_row(table, M, N, K, fmt_a, fmt_b, out_dtype, fast):
    try:
        return table.row(M, N, K, fmt_a, fmt_b, out_dtype, fast)
    except TableDataError as e:
        raise SplitKUnknownError(f"split-K table {table.table_id!r}: {e}") from None
