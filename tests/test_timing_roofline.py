"""Timing statistics and roofline floors (pure arithmetic: runs on CPU)."""
import math

import numpy as np
import pytest

from flashtutor.problems import Problem, SHAPE_SETS
from flashtutor.roofline import datasheet_peaks, percent_of_floor
from flashtutor.timing import Stats, ratio_stats


def test_stats_match_numpy_quantiles():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0, 100.0, 2.5]
    s = Stats.of(xs)
    assert s.median_us == np.median(xs)
    assert s.p10_us == pytest.approx(np.quantile(xs, 0.1))
    assert s.p90_us == pytest.approx(np.quantile(xs, 0.9))
    assert s.n == 7


def test_median_ignores_an_outlier():
    s = Stats.of([10.0] * 49 + [10_000.0])
    assert s.median_us == 10.0
    assert s.spread == 0.0


def test_spread_and_ratio():
    a, b = Stats.of([9.0, 10.0, 11.0]), Stats.of([4.0, 5.0, 6.0])
    assert a.spread == pytest.approx((10.8 - 9.2) / 10)
    assert ratio_stats(a, b) == 2.0


def test_stats_rejects_empty():
    with pytest.raises(ValueError):
        Stats.of([])


def test_datasheet_lookup_prefers_specific_names():
    assert datasheet_peaks("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert datasheet_peaks("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert datasheet_peaks("NVIDIA H200").name == "H200 SXM"
    assert datasheet_peaks("NVIDIA A100-SXM4-80GB").hbm_tbs == pytest.approx(2.039)
    assert datasheet_peaks("NVIDIA L4").name == "L4"
    assert datasheet_peaks("Radeon") is None


def test_floor_is_max_of_memory_and_compute():
    pk = datasheet_peaks("NVIDIA H100 80GB HBM3")
    p = Problem(32, 16, 128, 64)
    f = pk.floor_us(p)
    assert f["memory_us"] == pytest.approx(p.min_bytes / 3.35e12 * 1e6)
    assert f["compute_us"] == pytest.approx(p.flops / 989.4e12 * 1e6)
    assert f["floor_us"] == max(f["memory_us"], f["compute_us"])
    assert f["bound"] == "memory"                      # short sequences are memory-bound
    big = pk.floor_us(Problem(4, 32, 4096, 128))
    assert big["bound"] == "compute"                   # long ones are compute-bound


def test_percent_of_floor():
    assert percent_of_floor(20.0, 10.0) == 50.0
    assert math.isnan(percent_of_floor(0.0, 10.0))


def test_shape_sets_cover_the_design():
    assert SHAPE_SETS["seed"] == (Problem(1, 16, 1024, 64),)
    assert {(p.S, p.B) for p in SHAPE_SETS["small"]} == {(S, B) for S in (128, 256, 512) for B in (8, 16, 32)}
    assert {p.D for p in SHAPE_SETS["large"]} == {64, 128} and {p.S for p in SHAPE_SETS["large"]} == {4096, 8192}
    odd = SHAPE_SETS["odd"]
    assert {1, 113, 1023} <= {p.S for p in odd} and all(p.B * p.H > 1 for p in odd)
