"""analysis/demo_figure.py draws the demo's figure from report dicts alone: medians with their
min..max range per method and rank count, staging as copy + read, the copy alone as a floor."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "analysis"))
import demo_figure  # noqa: E402

MiB = 1024 * 1024


def report(method, ranks, makespan, stage=None, read=None):
    """The fields the figure reads, as a report carries them."""
    rep = {"mode": "direct", "config": {"method": method, "resolved_method": method},
           "aggregate": {"ranks": ranks, "makespan_s": makespan},
           "cube": {"object_bytes": 256 * MiB}}
    if stage is not None:
        rep["baseline"] = {"stage_s": stage, "read_makespan_s": read, "total_s": stage + read, "read_ranks": ranks}
    return rep


def sweep():
    reports = []
    for n, base in ((1, 0.9), (2, 0.5), (4, 0.3)):
        for k, jitter in enumerate((0.0, 0.1, 0.4)):  # three repeats: the median is the middle one
            reports.append(report("presigned", n, base + jitter, stage=1.0 + jitter, read=2 * base))
            reports.append(report("s3", n, base + 2 * jitter))
    return reports


def test_medians_ranges_and_the_floor(tmp_path):
    points, copies, size = demo_figure.demo_points(sweep())
    stats = demo_figure.summary(points)
    assert set(stats) == {"direct presigned", "direct s3", demo_figure.STAGING}
    assert stats["direct presigned"][4] == pytest.approx((0.4, 0.3, 0.7))
    assert stats["direct s3"][1] == pytest.approx((1.1, 0.9, 1.7))
    assert stats[demo_figure.STAGING][2] == pytest.approx((2.1, 2.0, 2.4))  # copy + read, per repeat
    assert sorted(copies) == pytest.approx([1.0] * 3 + [1.1] * 3 + [1.4] * 3) and size == 256 * MiB
    assert demo_figure._headline(stats) == "4 ranks: direct presigned 0.40 s vs staging 1.70 s (4.2x faster)"

    path = demo_figure.plot_demo(sweep(), str(tmp_path / "demo.png"))
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 100_000  # small enough to commit


def test_a_report_without_a_baseline_adds_no_staging_point(tmp_path, monkeypatch):
    points, copies, _ = demo_figure.demo_points([report("s3", 2, 0.5)])
    assert list(points) == ["direct s3"] and copies == []
    assert demo_figure._headline(demo_figure.summary(points)) == ""
    drawn = []  # the figure plot_demo closes, kept to look at what it drew
    monkeypatch.setattr(demo_figure.plt, "close", drawn.append)
    path = demo_figure.plot_demo([report("s3", 2, 0.5)], str(tmp_path / "one.png"))
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    (ax,) = drawn[0].axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["direct s3 (n=1)"]  # no staging, no floor
    (series,) = ax.containers  # one errorbar series: the direct point alone
    data_line, caps, _ = series.lines
    xs, ys = data_line.get_data()
    assert list(xs) == [2] and list(ys) == [0.5]
    assert [line for line in ax.lines if line is not data_line and line not in caps] == []  # no dotted floor
    assert "staging" not in ax.get_title() and "ranks:" not in ax.get_title()
    with pytest.raises(demo_figure.IngestError, match="no report"):
        demo_figure.plot_demo([], str(tmp_path / "none.png"))
