"""One recorded split-K table: rows by shape and setting, its envelope bound, its replay list.

A table is a JSON document (tables/splitk/<table_id>.json, format in docs/splitk_tables.md).
Its rows are either listed in the JSON (`rows`) or, for the vendored cuBLASLt recordings, kept
in an npz of columns that holds every workspace of one GPU (`data` names the file, its sha256
and the workspace). The npz is read on the first lookup, not at import: it becomes a sorted
64-bit key per row, found by bisection (the JSON rows are a dict, the plain reference).
"""
import array
import bisect
import hashlib
import io
import json
from pathlib import Path
from typing import Optional

from ..formats import BY_NUMPY


def _short(numpy_name):
    """mmaemu's name of a dtype as the recorded tables write it ("bfloat16" -> "bf16")."""
    return BY_NUMPY[numpy_name].name


# npz key layout: setting (fa, fb, out, fast) | M | N | K, 6 + 15 + 21 + 22 = 64 bits
_K_BITS, _N_BITS, _M_BITS = 22, 21, 15

# SplitTable.columns(): a setting as one int, a scheme as an index into SCHEME_NAMES
SCHEME_NAMES = ("none", "contiguous", "serial", "pairwise")
_FMT_CODE = {"e4m3": 0, "e5m2": 1}
_OUT_CODE = {"f32": 0, "bf16": 1, "f16": 2, "e4m3": 3, "e5m2": 4}


def setting_text(fmt_a, fmt_b, out_dtype, fast):
    return f"{fmt_a} x {fmt_b} -> {out_dtype}, {'fast' if fast else 'non-fast'} accumulation"


def setting_code(fmt_a, fmt_b, out_dtype, fast):
    """The setting as SplitTable.columns() numbers it, or None for a format or dtype it has no code for."""
    fa, fb, out = _FMT_CODE.get(fmt_a), _FMT_CODE.get(fmt_b), _OUT_CODE.get(out_dtype)
    if fa is None or fb is None or out is None:
        return None
    return fa | fb << 1 | out << 2 | int(bool(fast)) << 5


class TableDataError(Exception):
    """The table's data file is missing, corrupted or does not fit the loader."""


class _NpzRows:
    """The rows of one workspace of a vendored npz, loaded on first use."""

    def __init__(self, path: Path, spec: dict):
        self.path, self.spec = path, spec
        self._cols = None

    def _read(self):
        """The npz (sha256 checked) and the mask of this workspace's rows."""
        import numpy as np
        try:
            raw = self.path.read_bytes()
        except OSError as e:
            raise TableDataError(f"{self.path} is missing ({e.strerror})") from None
        want = self.spec.get("sha256")
        if want and hashlib.sha256(raw).hexdigest() != want:
            raise TableDataError(f"{self.path} is corrupted (sha256 differs from the table's)")
        z = np.load(io.BytesIO(raw))
        return z, z["ws"] == self.spec["ws_code"]

    def _load(self):
        import numpy as np
        z, sel = self._read()
        M, N, K = (z[c][sel].astype(np.uint64) for c in ("M", "N", "K"))
        if M.size and (M.max() >> _M_BITS or N.max() >> _N_BITS or K.max() >> _K_BITS):
            raise TableDataError(f"{self.path}: a shape does not fit the key layout")
        setting = (z["fa"][sel].astype(np.uint64) | z["fb"][sel].astype(np.uint64) << 1
                   | z["out"][sel].astype(np.uint64) << 2 | z["fast"][sel].astype(np.uint64) << 5)
        keys = (setting << (_M_BITS + _N_BITS + _K_BITS) | M << (_N_BITS + _K_BITS)
                | N << _K_BITS | K)
        order = np.argsort(keys, kind="stable")
        # array.array + bisect: a scalar lookup without numpy's per-call overhead, 8 bytes a row
        self._keys = array.array("Q", keys[order].tobytes())
        self._cols = {c: array.array(code, z[c][sel][order].astype(dtype).tobytes())
                      for c, code, dtype in (("splitK", "B", np.uint8), ("custom", "B", np.uint8),
                                             ("algo", "h", np.int16), ("tile", "h", np.int16))}
        codes = self.spec["codes"]
        self._fmt = {v: int(k) for k, v in codes["fa/fb"].items()}
        self._out = {_short(v): int(k) for k, v in codes["out"].items()}
        self._scheme = {int(k): v for k, v in codes["custom -> scheme"].items()}
        self._scheme_default = codes.get("custom -> scheme, unlisted")

    def __len__(self):
        return int(self.spec["rows"])

    def columns(self):
        """This workspace's rows as numpy columns (SplitTable.columns gives the format)."""
        import numpy as np
        z, sel = self._read()
        codes = self.spec["codes"]
        fmt = np.array([_FMT_CODE[codes["fa/fb"][str(i)]] if str(i) in codes["fa/fb"] else -1
                        for i in range(256)], np.int64)
        out = np.array([_OUT_CODE[_short(codes["out"][str(i)])] if str(i) in codes["out"]
                        else -1 for i in range(256)], np.int64)
        fa, fb, o = fmt[z["fa"][sel]], fmt[z["fb"][sel]], out[z["out"][sel]]
        if (fa < 0).any() or (fb < 0).any() or (o < 0).any():
            raise TableDataError(f"{self.path}: a format or output code the table does not name")
        S = z["splitK"][sel].astype(np.int64)
        custom = z["custom"][sel]
        scheme = np.zeros(S.size, np.int64)
        for c in np.unique(custom[S > 1]):
            name = codes["custom -> scheme"].get(
                str(int(c)), codes.get("custom -> scheme, unlisted"))
            if name is None:
                raise TableDataError(f"{self.path}: customOption {c} has no reduction scheme")
            scheme[(custom == c) & (S > 1)] = SCHEME_NAMES.index(name)
        return {"M": z["M"][sel].astype(np.int64), "N": z["N"][sel].astype(np.int64),
                "K": z["K"][sel].astype(np.int64),
                "setting": fa | fb << 1 | o << 2 | z["fast"][sel].astype(np.int64) << 5,
                "S": S, "scheme": scheme}

    def get(self, M, N, K, fmt_a, fmt_b, out_dtype, fast):
        if self._cols is None:
            self._load()
        fa, fb, out = self._fmt.get(fmt_a), self._fmt.get(fmt_b), self._out.get(out_dtype)
        if fa is None or fb is None or out is None or min(M, N, K) < 0 \
                or M >> _M_BITS or N >> _N_BITS or K >> _K_BITS:
            return None
        setting = fa | fb << 1 | out << 2 | int(bool(fast)) << 5
        key = (setting << (_M_BITS + _N_BITS + _K_BITS) | M << (_N_BITS + _K_BITS)
               | N << _K_BITS | K)
        i = bisect.bisect_left(self._keys, key)
        if i == len(self._keys) or self._keys[i] != key:
            return None
        S, custom = self._cols["splitK"][i], self._cols["custom"][i]
        scheme = self._scheme.get(custom, self._scheme_default) if S > 1 else "none"
        if scheme is None:
            raise TableDataError(f"{self.path}: customOption {custom} has no reduction scheme")
        return {"splits": S, "scheme": scheme,
                "note": f"table row: algo {self._cols['algo'][i]}, tile "
                        f"{self._cols['tile'][i]}, numSplitsK {S}, customOption {custom}"}


class SplitTable:
    """One recorded split-K table: rows keyed by shape and setting, an envelope, provenance."""

    def __init__(self, data: dict, base: Optional[Path] = None):
        self.table_id = data["table_id"]
        self.provenance = data.get("provenance", {})
        self.rows = {}
        for r in data.get("rows", []):
            self.rows[_key(r["M"], r["N"], r["K"], r["fmt_a"], r["fmt_b"], r["out_dtype"],
                           bool(r["fast_accum"]))] = r
        self._base = base
        spec = data.get("data")
        self._npz = _NpzRows(self._resolve(spec["npz"]), spec) if spec else None
        self._columns = None
        self._combos_spec = data.get("verified_combos")
        self._combos = None
        env = data.get("envelope") or {}
        self.envelope_kind = env.get("kind", "per_k")
        self.bounds = env.get("bounds", [])
        self.K_grid, self.K_min, self.K_max = env.get("K_grid"), env.get("K_min"), env.get("K_max")
        self.envelope_validated = bool(env.get("validated", False))
        self.envelope_note = env.get("note", "")
        self.envelope_basis = env.get("basis", "")  # what backs the bound, in a few words

    def _resolve(self, rel):
        if self._base is None:
            from .profiles import tables_dir
            self._base = tables_dir() / "splitk"
        return Path(self._base) / rel

    def __len__(self):
        return len(self.rows) + (len(self._npz) if self._npz is not None else 0)

    def columns(self):
        """Every row that records a split decision, as numpy int64 columns M, N, K, setting
        (setting_code), S and scheme (an index into SCHEME_NAMES, 0 when S is 1); read once and
        cached. A JSON row replaces the npz row of the same shape and setting, as in row()."""
        if self._columns is None:
            import numpy as np
            names = ("M", "N", "K", "setting", "S", "scheme")
            cols = self._npz.columns() if self._npz is not None else \
                {c: np.zeros(0, np.int64) for c in names}
            extra = []
            for r in self.rows.values():
                code = setting_code(r["fmt_a"], r["fmt_b"], r["out_dtype"], bool(r["fast_accum"]))
                if r.get("splits") is None or code is None:
                    continue
                S = int(r["splits"])
                extra.append((int(r["M"]), int(r["N"]), int(r["K"]), code, S,
                              SCHEME_NAMES.index(r.get("scheme", "none")) if S > 1 else 0))
            if extra:
                keep = np.ones(cols["M"].size, bool)
                for e in extra:  # few JSON rows: a mask per row is cheap
                    keep &= ~((cols["M"] == e[0]) & (cols["N"] == e[1]) & (cols["K"] == e[2])
                              & (cols["setting"] == e[3]))
                new = np.array(extra, np.int64)
                cols = {n: np.concatenate([cols[n][keep], new[:, i]]) for i, n in enumerate(names)}
            self._columns = cols
        return self._columns

    def row(self, M, N, K, fmt_a, fmt_b, out_dtype, fast):
        """The recorded row as a dict (splits, scheme, note, maybe verified), or None."""
        r = self.rows.get(_key(M, N, K, fmt_a, fmt_b, out_dtype, fast))
        if r is None and self._npz is not None:
            r = self._npz.get(int(M), int(N), int(K), fmt_a, fmt_b, out_dtype, fast)
            if r is not None and r["splits"] > 1:
                r["verified"] = self.replayed(r["splits"], r["scheme"], fmt_a, fmt_b, out_dtype, fast)
        return r

    def replayed(self, S, scheme, fmt_a, fmt_b, out_dtype, fast) -> bool:
        """True when the table's replay list holds this (S, scheme, fast, formats, out dtype)."""
        if self._combos_spec is None:
            return False
        if self._combos is None:
            path = self._resolve(self._combos_spec["path"])
            try:
                with open(path) as f:
                    doc = json.load(f)
            except (OSError, ValueError) as e:
                raise TableDataError(f"{path} cannot be read ({e})") from None
            self._combos = {(int(c["S"]), c["scheme"], bool(c["fast"]), *c["fmt_pair"].split("x"),
                             _short(c["out"])) for c in doc["combos"] if c.get("verified")}
        return (int(S), scheme, bool(fast), fmt_a, fmt_b, out_dtype) in self._combos

    def bound(self, K, fmt_a, fmt_b, out_dtype, fast):
        """(B, how B was found) for the envelope's "S = 1 when M*N > B", or (None, why not)."""
        if self.envelope_kind == "k_grid":
            if not self.K_min <= K <= self.K_max:
                return None, f"K = {K} is outside the envelope's {self.K_min} <= K <= {self.K_max}"
            i = bisect.bisect_left(self.K_grid, K)
            for b in self.bounds:
                if _setting_matches(b, fmt_a, fmt_b, out_dtype, fast):
                    return b["B"][i], (f"K = {K} rounded up to grid K {self.K_grid[i]}, "
                                       f"{self.K_min} <= K <= {self.K_max}")
        elif self.envelope_kind == "setting":
            for b in self.bounds:
                if _setting_matches(b, fmt_a, fmt_b, out_dtype, fast):
                    return b["B"], (f"B = 2 x {b['max_split_mn']}, the largest M*N that split in "
                                    "the table for the setting")
        else:  # per_k: the largest split M*N recorded at one K or a K range
            for b in self.bounds:
                if not _setting_matches(b, fmt_a, fmt_b, out_dtype, fast):
                    continue
                if b.get("K") == K or ("K_min" in b and b["K_min"] <= K <= b.get("K_max", float("inf"))):
                    return b["max_split_mn"], f"the largest split M*N recorded at K = {K}"
        return None, f"the envelope has no bound for K = {K} and this setting"


def _key(M, N, K, fmt_a, fmt_b, out_dtype, fast):
    return (int(M), int(N), int(K), fmt_a, fmt_b, out_dtype, bool(fast))


def _setting_matches(bound, fmt_a, fmt_b, out_dtype, fast):
    return all(bound.get(k, v) == v for k, v in
               (("fmt_a", fmt_a), ("fmt_b", fmt_b), ("out_dtype", out_dtype), ("fast_accum", fast)))
