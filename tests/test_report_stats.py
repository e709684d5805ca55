"""The report's statistics against values computed by hand and known tables."""

from __future__ import annotations

import math

import pytest

from specbench_tui.report.stats import distinguishable, from_moments, mean_ci, ratio_ci, t975


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.706), (2, 4.303), (3, 3.182), (10, 2.228), (30, 2.042), (60, 2.000), (1000, 1.962)],
)
def test_t_quantiles_match_the_table(df: float, expected: float) -> None:
    assert t975(df) == pytest.approx(expected, abs=2e-3)


def test_fractional_degrees_of_freedom_lie_between_their_neighbours() -> None:
    assert t975(2) > t975(2.5) > t975(3)


def test_mean_interval_of_three_repeats() -> None:
    m = mean_ci([98.0, 100.0, 102.0])
    assert m is not None and m.mean == pytest.approx(100.0) and m.n == 3
    half = 4.3027 * 2.0 / math.sqrt(3)
    assert m.lo == pytest.approx(100 - half, abs=1e-3)
    assert m.hi == pytest.approx(100 + half, abs=1e-3)


def test_one_unit_has_no_interval_and_is_never_told_apart() -> None:
    one = mean_ci([100.0])
    assert one is not None and one.lo is None and one.hi is None
    other = mean_ci([1.0, 1.1, 0.9])
    assert other is not None
    assert not distinguishable(one, other)
    assert mean_ci([]) is None


def test_ratio_interval_agrees_with_the_test() -> None:
    """Fieller's interval excludes 1 exactly where the means are told apart."""
    base = from_moments(100.0, 2.0, 3)
    clear = from_moments(200.0, 4.0, 3)
    close = from_moments(101.0, 2.0, 3)
    r = ratio_ci(clear, base)
    assert r is not None and r.value == pytest.approx(2.0)
    assert r.lo is not None and r.hi is not None and r.lo < 2.0 < r.hi
    assert r.beyond_one and distinguishable(clear, base)
    near = ratio_ci(close, base)
    assert near is not None and not near.beyond_one
    assert not distinguishable(close, base)


def test_ratio_over_a_denominator_near_zero_says_too_few_units() -> None:
    r = ratio_ci(from_moments(100.0, 1.0, 2), from_moments(10.0, 50.0, 2))
    assert r is not None and r.too_few and r.lo is None and r.hi is None
    assert not r.beyond_one


def test_ratio_whose_numerator_reaches_zero_says_too_few_units() -> None:
    # Two sessions of 40 and 360 tok/s over a steady baseline: the old interval ran from a
    # lower bound cut at 0.00x to some 200x.
    r = ratio_ci(mean_ci([40.0, 360.0]), mean_ci([10.0, 10.2]))  # type: ignore[arg-type]
    assert r is not None and r.value == pytest.approx(200 / 10.1)
    assert r.too_few and r.lo is None and r.hi is None and not r.beyond_one
    fine = ratio_ci(mean_ci([190.0, 210.0, 200.0]), mean_ci([10.0, 10.2, 10.1]))  # type: ignore[arg-type]
    assert fine is not None and not fine.too_few and fine.lo is not None and fine.lo > 1


def test_a_precise_config_never_loses_the_interval_a_noisy_one_keeps() -> None:
    """Against one baseline of three noisy repeats, a config measured to the digit and a
    noisy one: Welch's degrees of freedom are the baseline's alone for the first (t = 4.30)
    and nearly both sides' for the second (t near 3), so Fieller's interval at those
    degrees of freedom bounded the noisy config's speed-up (1.34x-24.71x) and not the
    precise one's. 'Too few units' is decided from the means' own intervals: both, or
    neither."""
    base = from_moments(100.0, 45.0, 3)  # its own interval: 100 +- 112, reaching zero
    precise = from_moments(300.0, 0.01, 3)
    noisy = from_moments(300.0, 60.0, 3)
    for config in (precise, noisy):
        r = ratio_ci(config, base)
        assert r is not None and r.too_few, config
    steady = from_moments(100.0, 20.0, 3)  # its interval excludes zero: both get one
    for config in (precise, from_moments(300.0, 60.0, 3)):
        r = ratio_ci(config, steady)
        assert r is not None and not r.too_few and r.lo is not None and r.lo > 1, config
