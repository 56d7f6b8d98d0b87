"""Split-K inference for shapes a recorded table does not hold (opt-in: `splitk="infer"`).

This is an inference from the table's own rows, not a decision recorded or checked on the GPU.
It always decides. Per setting (formats, output dtype, fast accumulation), in order:

1. absent: the table has no row of the setting: S = 1;
2. low K: no recorded row of the setting at K' <= K0 splits, and K <= K0: S = 1 (below the
   smallest recorded K this is an extrapolation, and the note says so);
3. M*N ceiling: M*N is above the largest M*N that split in the setting: S = 1;
4. neighbours: at each recorded K, the nearest recorded (M, N) of the setting in (log2 M, log2 N),
   if within TOL octaves. At a recorded K, that row's decision. Between two recorded K, S is
   interpolated linearly in K between the neighbours at the nearest recorded K below and above
   (rounded), and capped so that no slice is shorter than the shortest recorded one (K / S;
   not below the smallest recorded K).
   With a neighbour on one side of K only (beyond the recorded K range, or none within TOL on
   the other side), that neighbour's decision, capped alike. When no recorded K has a row
   within TOL, the nearest rows found stand in.

Its accuracy is measured by holding rows out of the table (whole K values, random rows, the
smallest and largest K, M and N) and predicting them from the rest:
`python -m mmaemu_tools.splitk_infer_eval` (results in docs/splitk_tables.md, "Inference"). The
note of each decision quotes the measured exact-match rate of the rule that decided, from
ACCURACY below. `Inference` is built from columns (SplitTable.columns()), so the evaluation
builds it from a table with rows held out.
"""
import math
import threading

import numpy as np

from .splitk_table import SCHEME_NAMES, setting_code, setting_text

# at each recorded K, a row within this many octaves of (M, N) in (log2 M, log2 N) is a neighbour
TOL = 1.0

RULES = ("absent", "low_k", "mn_ceiling", "same_k", "interp_agree", "interp", "one_sided")
_ABSENT, _LOW_K, _MN_CEIL, _SAME_K, _AGREE, _INTERP, _ONE_SIDED = range(len(RULES))

# Held-out exact match of (S, scheme) per table and rule, on the rows that decide()'s envelope
# (S = 1 when M*N > B) leaves undecided, where the inference is used: (percent, rows, hold-out).
# Printed by `python -m mmaemu_tools.splitk_infer_eval --constants` (about 1 minute; the hold-outs
# are described there); an entry needs 20 rows or more.
ACCURACY = {
    "heur_h100pcie_lt12.8.3.14": {
        "absent": (
            ("66.0", 30464, "proxy: whole setting held out"),
        ),
        "low_k": (
            ("100.0", 4256, "K hold-out"),
            ("100.0", 4480, "row hold-out"),
            ("100.0", 812, "proxy: smallest K held out"),
        ),
        "mn_ceiling": (
            ("99.7", 10276, "K hold-out"),
            ("99.7", 10346, "row hold-out"),
            ("100.0", 476, "proxy: largest K held out"),
        ),
        "same_k": (
            ("84.6", 15587, "row hold-out"),
        ),
        "interp_agree": (
            ("94.6", 4599, "K hold-out"),
        ),
        "interp": (
            ("77.7", 7693, "K hold-out"),
            ("73.3", 30, "row hold-out"),
        ),
        "one_sided": (
            ("35.9", 3640, "K hold-out"),
            ("57.1", 420, "proxy: largest K held out"),
        ),
    },
    "heur_h100pcie_lt12.8.3.14_ws32m": {
        "absent": (
            ("74.4", 67835, "proxy: whole setting held out"),
        ),
        "low_k": (
            ("100.0", 4256, "K hold-out"),
            ("100.0", 4480, "row hold-out"),
            ("100.0", 812, "proxy: smallest K held out"),
        ),
        "mn_ceiling": (
            ("95.1", 10386, "K hold-out"),
            ("99.8", 9632, "row hold-out"),
            ("87.6", 4144, "proxy: largest K held out"),
        ),
        "same_k": (
            ("92.3", 53656, "row hold-out"),
        ),
        "interp_agree": (
            ("98.7", 24206, "K hold-out"),
        ),
        "interp": (
            ("61.4", 11845, "K hold-out"),
            ("66.7", 36, "row hold-out"),
        ),
        "one_sided": (
            ("62.4", 17142, "K hold-out"),
            ("46.0", 3584, "proxy: largest K held out"),
        ),
    },
    "heur_rtx4060_lt12.8.3.14": {
        "absent": (
            ("82.3", 199601, "proxy: whole setting held out"),
        ),
        "low_k": (
            ("100.0", 82684, "K hold-out"),
            ("100.0", 84444, "row hold-out"),
            ("100.0", 6368, "proxy: smallest K held out"),
        ),
        "mn_ceiling": (
            ("99.8", 7490, "K hold-out"),
            ("100.0", 7161, "row hold-out"),
            ("100.0", 331, "proxy: smallest K held out"),
            ("100.0", 505, "proxy: largest K held out"),
        ),
        "same_k": (
            ("91.1", 105850, "row hold-out"),
        ),
        "interp_agree": (
            ("98.5", 84081, "K hold-out"),
            ("97.5", 1725, "row hold-out"),
        ),
        "interp": (
            ("28.9", 14716, "K hold-out"),
            ("51.6", 277, "row hold-out"),
        ),
        "one_sided": (
            ("86.2", 10630, "K hold-out"),
            ("85.4", 144, "row hold-out"),
            ("99.8", 5915, "proxy: smallest K held out"),
            ("65.9", 3553, "proxy: largest K held out"),
        ),
    },
    "heur_rtx4060_lt12.8.3.14_ws4m": {
        "absent": (
            ("80.9", 234570, "proxy: whole setting held out"),
        ),
        "low_k": (
            ("100.0", 53301, "K hold-out"),
            ("100.0", 55101, "row hold-out"),
            ("100.0", 4518, "proxy: smallest K held out"),
        ),
        "mn_ceiling": (
            ("99.9", 11797, "K hold-out"),
            ("99.9", 11763, "row hold-out"),
            ("100.0", 323, "proxy: smallest K held out"),
            ("99.3", 410, "proxy: largest K held out"),
        ),
        "same_k": (
            ("92.3", 161877, "row hold-out"),
        ),
        "interp_agree": (
            ("98.7", 134477, "K hold-out"),
            ("98.2", 4760, "row hold-out"),
        ),
        "interp": (
            ("28.7", 18643, "K hold-out"),
            ("53.7", 408, "row hold-out"),
        ),
        "one_sided": (
            ("86.3", 16352, "K hold-out"),
            ("94.4", 661, "row hold-out"),
            ("99.8", 9209, "proxy: smallest K held out"),
            ("61.8", 5000, "proxy: largest K held out"),
        ),
    },
}


class Inference:
    """The inference built from a table's columns (SplitTable.columns(), or a subset of them)."""

    def __init__(self, columns, gpu=""):
        self.gpu = gpu
        M, N, K = (np.asarray(columns[c], np.int64) for c in ("M", "N", "K"))
        setting = np.asarray(columns["setting"], np.int64)
        S, scheme = np.asarray(columns["S"], np.int64), np.asarray(columns["scheme"], np.int64)
        order = np.lexsort((M, N, K, setting))
        M, N, K, setting, S, scheme = (a[order] for a in (M, N, K, setting, S, scheme))
        cuts = np.flatnonzero(np.diff(setting)) + 1
        self._settings = {int(setting[a]): _Setting(M[a:b], N[a:b], K[a:b], S[a:b], scheme[a:b])
                          for a, b in zip(np.r_[0, cuts], np.r_[cuts, M.size]) if b > a}

    def predict(self, M, N, K, setting):
        """Vectorised decisions for one setting code: dict of arrays S, scheme (SCHEME_NAMES
        index), rule (RULES index) and the neighbours' K, M, N, S ("a": below, "b": above)."""
        M, N, K = (np.atleast_1d(np.asarray(x, np.int64)) for x in (M, N, K))
        st = self._settings.get(setting)
        if st is None:
            z = np.zeros(M.size, np.int64)
            return {"S": z + 1, "scheme": z, "rule": z + _ABSENT}
        return st.predict(M, N, K)

    def decide(self, M, N, K, fmt_a, fmt_b, out_dtype, fast, table_id=None):
        """(S, scheme, note) for one shape."""
        code = setting_code(fmt_a, fmt_b, out_dtype, fast)
        p = self.predict(M, N, K, code)
        S, rule = int(p["S"][0]), int(p["rule"][0])
        scheme = SCHEME_NAMES[int(p["scheme"][0])] if S > 1 else "none"
        return S, scheme, self._note(p, rule, S, scheme, M, N, K, code, fmt_a, fmt_b, out_dtype,
                                     fast, table_id)

    def _note(self, p, rule, S, scheme, M, N, K, code, fmt_a, fmt_b, out_dtype, fast, table_id):
        where = f"{self.gpu} " if self.gpu else ""
        setting = setting_text(fmt_a, fmt_b, out_dtype, fast)
        st = self._settings.get(code)
        if rule == _ABSENT:
            why = f"the table has no row of setting {setting}: S = 1 assumed"
        elif rule == _LOW_K:
            why = (f"no split in any of the {st.low_k_rows} recorded {where}rows of setting {setting} "
                   f"with K <= {st.K0} (any M, N)")
            if K < st.Ks[0]:
                why += f"; no recording below K = {st.Ks[0]}: extrapolated"
        elif rule == _MN_CEIL:
            why = (f"M*N = {M * N} is above {st.mn_max}, the largest M*N that split in the "
                   f"{st.rows} recorded {where}rows of setting {setting}")
        else:
            a = _neighbour(p, "a")
            b = _neighbour(p, "b")
            if rule == _SAME_K:
                why = f"at the recorded K = {K}, the nearest recorded shape of setting {setting}: {a}"
            elif rule in (_AGREE, _INTERP):
                how = "agree" if rule == _AGREE else "differ: S interpolated linearly in K"
                why = f"the nearest recorded shapes of setting {setting} at K below and above {how}: {a}; {b}"
            else:
                lo, hi = st.Ks[0], st.Ks[-1]
                if lo <= K <= hi:
                    side = "above" if a else "below"
                    why = (f"no recorded K {side} K = {K} has a shape of setting {setting} within "
                           f"{TOL:g} octave of (M, N); the nearest at the nearest K that has one: {a or b}")
                else:
                    why = (f"K = {K} is outside the recorded K {lo}..{hi} of setting {setting}: "
                           f"the nearest recorded shape at the nearest K that has one within "
                           f"{TOL:g} octave of (M, N): {a or b}; extrapolated")
            if rule != _SAME_K and K >= st.Ks[0] and S == st.cap_S(K) < max(p["aS"][0], p["bS"][0]):
                why += f"; S capped at {st.cap_S(K)} (no recorded slice shorter than K/S = {st.kmin:g})"
        acc = ACCURACY.get(table_id, {}).get(RULES[rule])
        measured = ("; held-out exact match of this rule: "
                    + ", ".join(f"{pct} % ({how}, {n} rows)" for pct, n, how in acc)
                    if acc else "; accuracy of this rule not measured for this table")
        res = f"S = {S}" + (f" ({scheme})" if S > 1 else "")
        return f"inferred ({RULES[rule]}), {res}: {why}{measured}"


def _neighbour(p, side):
    if p[side + "K"][0] < 0:
        return ""
    S, sch = int(p[side + "S"][0]), SCHEME_NAMES[int(p[side + "sch"][0])]
    return (f"M = {p[side + 'M'][0]}, N = {p[side + 'N'][0]}, K = {p[side + 'K'][0]}: S = {S}"
            + (f" ({sch})" if S > 1 else ""))


class _Setting:
    """One setting's rows sorted by (K, N, M), grouped by K (slices) and by (K, N) (groups)."""

    def __init__(self, M, N, K, S, scheme):
        self.rows = M.size
        self.M, self.N, self.S, self.sch = M, N, S, scheme
        self.lgM = np.log2(M)
        self.Ks, kidx = np.unique(K, return_inverse=True)
        gstart = np.flatnonzero(np.r_[True, (np.diff(K) != 0) | (np.diff(N) != 0)])
        self.gslice, self.gN = kidx[gstart], N[gstart]
        self.glgN = np.log2(self.gN)
        self.gkey = self.gslice << 32 | self.gN
        self.rgroup = np.cumsum(np.r_[False, (np.diff(K) != 0) | (np.diff(N) != 0)])
        self.rkey = self.rgroup << 32 | M
        split = S > 1
        # low K: the largest recorded K such that no row at or below it splits
        first = K[split].min() if split.any() else None
        below = self.Ks[self.Ks < first] if first is not None else self.Ks
        self.K0 = int(below[-1]) if below.size else None
        self.low_k_rows = int((K <= self.K0).sum()) if self.K0 is not None else 0
        self.mn_max = int((M * N)[split].max()) if split.any() else None
        # the shortest slice (K / S) of any recorded split: S at K is capped at K / kmin
        self.kmin = float((K[split] / S[split]).min()) if split.any() else math.inf

    def cap_S(self, K):
        return np.maximum(1, np.floor(K / self.kmin)).astype(np.int64)

    def _nearest(self, lgM, lgN, M, N):
        """Per query and recorded K: squared distance and index of the nearest row (inf, -1: none)."""
        L, G, R = self.Ks.size, self.gkey.size, self.rkey.size
        sl = np.arange(L, dtype=np.int64)
        # the recorded N just below and above N at each K, then the recorded M just below and
        # above M at each of those N: the nearest of these 4 rows, by bisection instead of a
        # search of all rows (the nearest in (log M, log N) wherever a K's rows form a grid)
        p = np.searchsorted(self.gkey, sl[None, :] << 32 | N[:, None])
        g = np.stack([p - 1, p], -1)
        gc = np.minimum(np.maximum(g, 0), G - 1)  # np.clip costs more for small arrays
        gok = (g >= 0) & (g < G) & (self.gslice[gc] == sl[None, :, None])
        q = np.searchsorted(self.rkey, gc << 32 | M[:, None, None])
        r = np.stack([q - 1, q], -1)
        rc = np.minimum(np.maximum(r, 0), R - 1)
        ok = gok[..., None] & (r >= 0) & (r < R) & (self.rgroup[rc] == gc[..., None])
        d = (self.lgM[rc] - lgM[:, None, None, None]) ** 2 \
            + (self.glgN[gc][..., None] - lgN[:, None, None, None]) ** 2
        d = np.where(ok, d, np.inf).reshape(M.size, L, 4)
        j = np.argmin(d, axis=2)
        best = np.take_along_axis(d, j[..., None], 2)[..., 0]
        row = np.take_along_axis(rc.reshape(M.size, L, 4), j[..., None], 2)[..., 0]
        return best, np.where(np.isfinite(best), row, -1)

    def predict(self, M, N, K):
        Q, L = M.size, self.Ks.size
        Mc, Nc = np.minimum(np.maximum(M, 1), 2 ** 31 - 1), np.minimum(np.maximum(N, 1), 2 ** 31 - 1)
        ceil = Mc * Nc > self.mn_max if self.mn_max is not None else np.zeros(Q, bool)
        low = K <= (self.K0 if self.K0 is not None else -1)
        if (ceil | low).all():  # decided by the rules alone: no neighbour search
            z = np.zeros(Q, np.int64)
            out = {"S": z + 1, "scheme": z, "rule": np.where(low, _LOW_K, _MN_CEIL)}
            out.update({side + c: z - 1 for side in "ab" for c in ("K", "M", "N")})
            out.update({side + c: z for side in "ab" for c in ("S", "sch")})
            return out
        D, row = self._nearest(np.log2(Mc), np.log2(Nc), Mc, Nc)
        cov = D <= TOL * TOL
        none = ~cov.any(1)
        cov[none] = D[none] <= D[none].min(1, keepdims=True)  # the nearest rows stand in
        sl = np.arange(L)
        a = np.where(cov & (self.Ks[None, :] <= K[:, None]), sl, -1).max(1)
        b = np.where(cov & (self.Ks[None, :] >= K[:, None]), sl, L).min(1)
        has_a, has_b = a >= 0, b < L
        ac, bc = np.maximum(a, 0), np.minimum(b, L - 1)
        ra = np.where(has_a, row[np.arange(Q), ac], -1)
        rb = np.where(has_b, row[np.arange(Q), bc], -1)
        Sa = np.where(has_a, self.S[ra], 0)
        Sb = np.where(has_b, self.S[rb], 0)
        Ka = np.where(has_a, self.Ks[ac], -1)
        Kb = np.where(has_b, self.Ks[bc], -1)
        both = has_a & has_b & (a != b)
        t = np.where(both, (K - Ka) / np.where(both, Kb - Ka, 1), 0.0)
        # linear in K: on the H100 the largest recorded S grows in proportion to K (every split
        # row has K / S >= 2730.7)
        interp = np.floor(Sa + (Sb - Sa) * t + 0.5).astype(np.int64)
        S = np.where(both, interp, np.where(has_a, Sa, Sb))
        rule = np.where(a == b, _SAME_K, np.where(both, np.where(Sa == Sb, _AGREE, _INTERP), _ONE_SIDED))
        # the cap comes from the recorded K: below them it is not applied (holding out the
        # smallest K, the RTX 4060's splits at K = 16 were all capped to S = 1 by it)
        capped = (rule != _SAME_K) & (K >= self.Ks[0])
        S = np.where(capped, np.minimum(S, self.cap_S(K)), S)
        S = np.maximum(S, 1)
        # the scheme of the neighbour nearer in K, unless it did not split
        near_a = has_a & (~has_b | (K - Ka <= Kb - K))
        first, second = np.where(near_a, ra, rb), np.where(near_a, rb, ra)
        sch = np.where(self.S[first] > 1, self.sch[first], self.sch[second])
        sch = np.where(S > 1, sch, 0)
        for mask, code in ((ceil, _MN_CEIL), (low, _LOW_K)):  # low K first: it wins
            S, sch, rule = np.where(mask, 1, S), np.where(mask, 0, sch), np.where(mask, code, rule)
        out = {"S": S, "scheme": sch, "rule": rule}
        for side, r, k in (("a", ra, Ka), ("b", rb, Kb)):
            out[side + "K"] = k
            out[side + "M"] = np.where(r >= 0, self.M[r], -1)
            out[side + "N"] = np.where(r >= 0, self.N[r], -1)
            out[side + "S"] = np.where(r >= 0, self.S[r], 0)
            out[side + "sch"] = np.where(r >= 0, self.sch[r], 0)
        return out


_CACHE = {}
_LOCK = threading.Lock()


def inference_for(table) -> Inference:
    """The Inference of a SplitTable, built on first use from all its rows and kept."""
    inf = _CACHE.get(table.table_id)
    if inf is None or inf[0] is not table:
        with _LOCK:
            inf = _CACHE.get(table.table_id)
            if inf is None or inf[0] is not table:
                inf = (table, Inference(table.columns(), _gpu_text(table)))
                _CACHE[table.table_id] = inf
    return inf[1]


def _gpu_text(table):
    gpu = table.provenance.get("gpu", "").replace("NVIDIA ", "").replace("GeForce ", "")
    ws = table.provenance.get("workspace_bytes")
    if ws:
        gpu += f" ({ws // 2 ** 20} MiB workspace)" if ws >= 2 ** 20 else f" ({ws} B workspace)"
    return gpu


def infer(table, M, N, K, fmt_a, fmt_b, out_dtype, fast) -> tuple:
    """(S, scheme, note): always decides. scheme is "none" when S == 1, else the table's scheme
    ("contiguous" for the H100 tables, "serial"/"pairwise" for the RTX 4060 ones)."""
    return inference_for(table).decide(int(M), int(N), int(K), fmt_a, fmt_b, out_dtype,
                                       bool(fast), table.table_id)
