"""Means with 95% intervals over independent units (repeats, sessions), ratios of two such
means, and whether two means can be told apart.

The interval method is Student's t: a mean over ``n`` units gets ``t(0.975, n-1) * s /
sqrt(n)``. With three repeats that is a wide interval (t = 4.30), and it should be: three
numbers cannot pin a mean down better. A bootstrap over three values would only hide that.
Ratios (speed-ups) get Fieller's interval (Welch-Satterthwaite degrees of freedom), asymmetric
as a ratio's should be, and consistent with the t-test: it excludes 1 exactly when the test
tells the two means apart. Two means are told
apart by Welch's test at the 5% level (the difference's 95% interval excludes 0). A mean of a
single unit has no interval and is never told apart from anything.

Pure Python: no SciPy. The t quantiles come from a table for small degrees of freedom (the
common case: a handful of repeats) and a Cornish-Fisher expansion above it (error < 1e-4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

METHOD = (
    "mean over repeats with a Student-t 95% interval; speed-ups as ratios of means with "
    "Fieller's 95% interval (Welch-Satterthwaite degrees of freedom); two configs are told "
    "apart when Welch's test rejects equal means at the 5% level"
)

# t(0.975, df) for df = 1..30.
_T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip
_Z975 = 1.959963984540054


def t975(df: float) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (``df`` > 0; Welch's
    fractional values interpolate in 1/df, where the quantile is nearly linear)."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, not {df}")
    if df >= 30:
        z = _Z975
        return (
            z
            + (z**3 + z) / (4 * df)
            + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
        )
    if df <= 1:  # Welch's df is never below the smaller sample's n - 1, so only df == 1
        return _T975[0]
    lo = math.floor(df)
    if lo == df:
        return _T975[lo - 1]
    hi = lo + 1
    a, b = _T975[lo - 1], _T975[hi - 1]
    w = (1 / lo - 1 / df) / (1 / lo - 1 / hi)
    return a + (b - a) * w


@dataclass(frozen=True)
class Mean:
    """A mean over ``n`` units with its 95% interval (None when n < 2)."""

    mean: float
    n: int
    sd: float | None
    lo: float | None
    hi: float | None

    @property
    def half(self) -> float | None:
        return None if self.hi is None else self.hi - self.mean


def mean_ci(values: Sequence[float]) -> Mean | None:
    """Mean and 95% t-interval of independent units; None for no values."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    n = len(xs)
    if n == 0:
        return None
    m = math.fsum(xs) / n
    if n < 2:
        return Mean(m, n, None, None, None)
    sd = math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (n - 1))
    h = t975(n - 1) * sd / math.sqrt(n)
    return Mean(m, n, sd, m - h, m + h)


def from_moments(mean: float, sd: float | None, n: int) -> Mean:
    """A :class:`Mean` from a mean, standard deviation and count computed elsewhere (polars)."""
    if n < 2 or sd is None or not math.isfinite(sd):
        return Mean(mean, n, None, None, None)
    h = t975(n - 1) * sd / math.sqrt(n)
    return Mean(mean, n, sd, mean - h, mean + h)


def _welch_df(va: float, na: int, vb: float, nb: int) -> float:
    num = (va + vb) ** 2
    den = (va**2 / (na - 1) if va else 0.0) + (vb**2 / (nb - 1) if vb else 0.0)
    return num / den if den > 0 else float(na + nb - 2)


TOO_FEW = "too few units"
"""What a ratio says instead of an interval when its means are too uncertain to bound it."""


@dataclass(frozen=True)
class Ratio:
    """A ratio of two means and its 95% interval; both bounds None: no interval, either one
    unit a side or ``too_few``: the denominator's interval reaches zero (no finite bound), or
    the numerator's does (the lower bound would be cut at zero). Such a ratio is printed with
    :data:`TOO_FEW`, never as ``[0.00x-...]``."""

    value: float
    lo: float | None
    hi: float | None
    too_few: bool = False

    @property
    def beyond_one(self) -> bool:
        """Whether the interval excludes 1: the two means differ beyond noise."""
        if self.lo is None:
            return False
        return self.lo > 1.0 or (self.hi is not None and self.hi < 1.0)


def ratio_ci(a: Mean, b: Mean) -> Ratio | None:
    """``a.mean / b.mean`` with Fieller's 95% interval; None when either mean is not positive.

    Fieller's interval holds every ratio r for which ``a - r*b = 0`` is not rejected by a t-test
    (Welch-Satterthwaite degrees of freedom at the estimate), so "the interval excludes 1" and
    "the two means differ" are the same statement. Where either mean's interval reaches zero
    the interval is unbounded or starts at zero: the ratio is ``too_few`` instead; that is
    decided first from each mean's own interval (it reaches zero), the same for every config
    set against one baseline, then from Fieller's.
    """
    if a.mean <= 0 or b.mean <= 0:
        return None
    r = a.mean / b.mean
    if a.sd is None or b.sd is None:
        return Ratio(r, None, None)
    if any(m.lo is not None and m.lo <= 0 for m in (a, b)):
        # Decided from each mean's own interval, so that the same baseline gives every
        # config the same answer: Welch's degrees of freedom grow with the config's own
        # noise, and a precise config (fewer of them, a larger t) lost its interval where a
        # noisy one kept it.
        return Ratio(r, None, None, too_few=True)
    va, vb = a.sd**2 / a.n, b.sd**2 / b.n
    if va == 0 and vb == 0:
        return Ratio(r, r, r)
    t = t975(_welch_df(va, a.n, r * r * vb, b.n))
    t2 = t * t
    den = b.mean**2 - t2 * vb
    if den <= 0:
        return Ratio(r, None, None, too_few=True)
    disc = a.mean**2 * vb + b.mean**2 * va - t2 * va * vb
    root = t * math.sqrt(max(disc, 0.0))
    lo = (a.mean * b.mean - root) / den
    hi = (a.mean * b.mean + root) / den
    if lo <= 0:
        return Ratio(r, None, None, too_few=True)
    return Ratio(r, lo, hi)


def distinguishable(a: Mean, b: Mean) -> bool:
    """Whether two means differ beyond noise (Welch, 5%); never with fewer than 2 units."""
    if a.sd is None or b.sd is None:
        return False
    va, vb = a.sd**2 / a.n, b.sd**2 / b.n
    se = math.sqrt(va + vb)
    diff = abs(a.mean - b.mean)
    if se == 0:
        return diff > 0
    return diff > t975(_welch_df(va, a.n, vb, b.n)) * se
