"""study-report: STUDY.md and the figures from a study.sqlite built row by row (a unit test of the
renderer: the rows are constructed, the database, reduction, figures and CLI are the real ones)."""
from __future__ import annotations

import itertools
import os

import matplotlib.image
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest import cli
from ingest.study import db, report, summary

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SPREAD = (0.9, 1.0, 1.2)  # three repeats per cell: the median is the cell's nominal time
_seq = itertools.count()

CONFIG = {"study": {"repeats": 3}, "processes": {"ranks": [1, 4, 8], "methods": ["presigned", "s3", "staging"]},
          "threads": {"threads": [1, 2, 4, 8]}, "strategies": {}, "libraries": {}, "order": {}, "layout": {},
          "stability": {"runs": 10}}
S5CMD, INGEST_TOOL = "s5cmd v2.3.0", "ingest 0.1.0"


def _row(cell, experiment, params, repeat, status="ok", **cols):
    row = {"cell": cell, "experiment": experiment, "params": params, "method": params.get("method"),
           "ranks": params.get("ranks", 1), "threads": params.get("threads"), "link": params.get("link", "loopback"),
           "repeat": repeat, "seq": next(_seq), "status": status, "started_utc": "2024-05-01T00:00:00Z",
           "host": "node1", "runtime_s": (cols.get("elapsed_s") or 1.0) + 0.5, "command": "python -m ingest run"}
    row.update(cols)
    return row


def _cell(cell, experiment, params, nominal_s, **cols):
    """Three ok repeats at 0.9, 1.0, 1.2 × nominal_s (median nominal_s)."""
    return [_row(cell, experiment, params, i + 1, elapsed_s=nominal_s * f, total_s=nominal_s * f, **cols)
            for i, f in enumerate(SPREAD)]


def _staging(tool, version, p, read_s, stage_s, link="loopback"):
    params = {"method": "staging", "stage_with": tool, "ranks": p, "threads": 4, "scaling": "weak", "link": link}
    return [_row(f"processes/staging-{tool}/p{p}@{link}", "processes", params, i + 1, elapsed_s=read_s * f,
                 stage_s=stage_s * f, total_s=(read_s + stage_s) * f, tool=version) for i, f in enumerate(SPREAD)]


def _direct(method, p, nominal_s, link="loopback"):
    params = {"method": method, "ranks": p, "threads": 4, "scaling": "weak", "link": link}
    return _cell(f"processes/{method}/p{p}@{link}", "processes", params, nominal_s)


def full_rows() -> list[dict]:
    """Every experiment; staging (s5cmd, the faster tool) wins at p=1, direct from p=4."""
    rows = []
    for p, (presigned_s, s3_s, s5_read, s5_stage, in_stage) in {1: (2.5, 2.0, 0.2, 0.8, 1.5),
                                                               4: (2.5, 3.0, 1.0, 4.0, 6.0),
                                                               8: (3.0, 4.0, 2.0, 8.0, 12.0)}.items():
        rows += _direct("presigned", p, presigned_s) + _direct("s3", p, s3_s)
        rows += _staging("s5cmd", S5CMD, p, s5_read, s5_stage) + _staging("ingest", INGEST_TOOL, p, s5_read, in_stage)
    # a failed s3 repeat at p=8 with an absurd time: counted, never in the median
    rows.append(_row("processes/s3/p8@loopback", "processes", {"method": "s3", "ranks": 8, "threads": 4},
                     4, status="failed", elapsed_s=1000.0, total_s=1000.0, exit_status=1, stderr_head="boom | x"))
    for t, sec in {1: 8.0, 2: 4.0, 4: 2.1, 8: 2.0}.items():
        rows += _cell(f"threads/presigned/t{t}", "threads", {"method": "presigned", "ranks": 1, "threads": t}, sec)
    for strat, sec, req in (("large", 1.0, 10), ("intermediate", 3.0, 100), ("small", 8.0, 5000), ("auto", 0.9, 12)):
        rows += _cell(f"strategies/presigned/{strat}", "strategies", {"method": "presigned", "strategy": strat}, sec,
                      requests=req, bytes_wire=2 * 2**20 if strat != "small" else 2**20, bytes_needed=2**20)
    for lib, ver in (("urllib3", "urllib3 2.2.1"), ("requests", "requests 2.31.0")):
        for cache, sec in (("fresh", 2.0), ("cached", 1.0)):
            unavailable = lib == "requests" and cache == "fresh"
            params = {"library": lib, "chunk_bytes": 2**20, "cache": cache,
                      "cache_result": "fresh-unavailable" if unavailable else cache,
                      "cache_reason": "not root: cannot drop the page cache" if unavailable else None}
            rows += _cell(f"libraries/{lib}/1MiB/{cache}", "libraries", params, sec, tool=ver, bytes_needed=2**24)
    for order, sec in (("sequential", 1.0), ("random", 1.1)):
        rows += _cell(f"order/presigned/{order}", "order", {"method": "presigned", "strategy": "small",
                                                             "order": order}, sec, requests=500)
    for layout, access, sec in (("ranged", "sequential", 3.0), ("tiled", "sequential", 1.5),
                                ("ranged", "parallel", 1.0), ("tiled", "parallel", 0.97)):
        rows += _cell(f"layout/{layout}/{access}", "layout", {"layout": layout, "access": access, "method": "s3"},
                      sec, requests=8, bytes_wire=2**22)
    for i in range(10):
        status = "failed" if i in (3, 7) else "timeout" if i == 5 else "ok"
        rows.append(_row("stability/presigned", "stability", {"method": "presigned"}, i + 1, status,
                         elapsed_s=1.0 + i / 10, retries=1, faults={"reset": 1} if i == 2 else {}))
    return rows


def write_db(tmp_path, rows, config=CONFIG) -> str:
    with db.connect(str(tmp_path / db.DB_NAME)) as conn:
        for r in rows:
            db.record(conn, r)
        for key, value in (("config", config), ("launcher", "mpiexec -n {ranks}"), ("host", "login1"),
                           ("cube", {"shape": [64, 256, 256], "dtype": ">f4", "object_bytes": 16 << 20,
                                     "source": "s3://study/cube.fits"}),
                           ("staging_tools", [{"name": "s5cmd", "version": "v2.3.0"}]),
                           ("started_utc", "2024-05-01T00:00:00Z"), ("boxes", {"count": 8, "grid": "2x2x2"})):
            db.set_meta(conn, key, value)
    conn.close()
    return str(tmp_path)


@pytest.fixture
def full_study(tmp_path):
    study = write_db(tmp_path, full_rows())
    assert cli.main(["study-report", study]) == 0
    return study, open(os.path.join(study, "STUDY.md"), encoding="utf-8").read()


def test_every_figure_is_a_png_with_the_expected_series(tmp_path):
    rows, _ = db.load(os.path.join(write_db(tmp_path, full_rows()), db.DB_NAME))
    drawn = report.load_figures_module().draw_all(rows, str(tmp_path / "figures"))
    expected = {"fig1": [f"staging read: {S5CMD}", f"staging read: {INGEST_TOOL}"],
                "fig2": ["S3 API"],
                "fig3": [f"staging total: {S5CMD} copy + read", "S3 API"],
                "fig6": ["presigned URL"],
                "fig7": [f"staging total: {S5CMD} copy + read", "presigned URL"]}
    assert {k: v[1] for k, v in drawn.items()} == expected
    for fig_id, (paths, _) in drawn.items():
        assert len(paths) == 1 and os.path.basename(paths[0]).startswith(fig_id)
        with open(paths[0], "rb") as fh:
            assert fh.read(8) == PNG_MAGIC
        image = matplotlib.image.imread(paths[0])
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_study_md_has_header_tables_and_figures(full_study):
    study, text = full_study
    for fig in ("fig1_staging_read", "fig2_s3_api", "fig3_staging_vs_s3", "fig6_threads", "fig7_staging_vs_presigned"):
        assert f"](figures/{fig}.png)" in text
        assert os.path.exists(os.path.join(study, "figures", fig + ".png"))
    for needle in ("s3://study/cube.fits", "mpiexec -n {ranks}", "login1", "2024-05-01T00:00:00Z", "not finished",
                   "Table 7.4", "Table 7.2", "seed 000 A–D", "amplification (wire/needed)", "2.000",
                   "not root: cannot drop the page cache", "\"stability\""):
        assert needle in text, needle
    assert "Not measured" in text and "every experiment has ok runs" in text
    # stability as seed 000: 10 attempts, 3 failed (2 failed + 1 timeout), 30.0 %
    assert "| presigned URL | 10 | 3 | 30.0 |" in text
    # the failed s3 repeat is counted beside its cell and listed, its 1000 s in no median
    assert "| S3 API | 8 | 4 | 3/1 | 4.00 s (3.60–4.80 s)" in text
    assert "1000" not in text.split("### Failed and timed-out runs")[0]
    assert "boom \\| x" in text


def test_recommendation_names_method_threads_strategy_crossover_layout(full_study):
    _, text = full_study
    rec = text.split("## Recommendation")[1].split("## Figures")[0]
    assert "**Method: presigned URL.** At p = 8" in rec and "3.00 s against 4.00 s" in rec
    assert "1.33× faster" in rec
    assert "**4 threads per rank** for presigned URL" in rec  # 2.1 s is within 10% of 2.0 s at 8
    assert "**Strategy: auto**" in rec
    assert "**Direct ingest beats staging from p = 4 processes**" in rec
    assert "staging takes 3.33× the direct time" in rec  # p=8: s5cmd 10 s vs presigned 3 s
    assert "sequential: tiled 1.50 s vs ranged 3.00 s, 2.00× faster: would pay" in rec
    assert "parallel: tiled 0.970 s vs ranged 1.00 s" in rec and "would not pay" in rec


def test_crossover_numbers_and_a_missing_point_in_the_gap():
    rows = full_rows()
    c = summary.crossover(rows)
    assert c["from_p"] == 4 and c["last_staging_win_p"] == 1 and c["largest_p"] == 8
    assert c["per_p"][1]["tool"] == S5CMD and not c["per_p"][1]["direct_wins"]
    assert c["per_p"][4]["method"] == "presigned" and c["ratio_at_largest"] == pytest.approx(10.0 / 3.0)
    # p=2: every staging run failed -> no comparison there, and the switch is placed in 2..4, not guessed
    rows += _direct("s3", 2, 1.0) + [_row("processes/staging-s5cmd/p2", "processes",
                                          {"method": "staging", "stage_with": "s5cmd", "ranks": 2}, 1, "failed")]
    c = summary.crossover(rows)
    assert c["missing"] == {2: "no ok staging run"} and c["gap_missing"] == [2] and c["from_p"] == 4
    assert "somewhere in 2..4" in report.rec_crossover(c)


def test_missing_experiments_are_absent_not_zero(tmp_path):
    rows = [r for r in full_rows() if r["experiment"] == "processes" and r["params"]["method"] != "staging"]
    config = {"study": {}, "processes": {"ranks": [1, 4, 8], "methods": ["presigned", "s3"]}, "layout": {}}
    study = write_db(tmp_path, rows, config)
    assert cli.main(["study-report", study]) == 0
    text = open(os.path.join(study, "STUDY.md"), encoding="utf-8").read()
    assert "experiment `threads` was not in the study config" in text
    assert "experiment `layout` was in the config but no run of it is recorded" in text
    assert "**Fig. 1** (staging: read time from the staged copy vs processes) not drawn: " \
           "`processes.methods` did not include `staging`" in text
    assert "**Fig. 6**" in text and "fig6_threads.png" not in text
    assert sorted(os.listdir(os.path.join(study, "figures"))) == ["fig2_s3_api.png"]
    rec = text.split("## Recommendation")[1].split("## Figures")[0]
    assert "no `threads` run is recorded" in rec and "no process count has both a staging total" in rec
    assert "0.00 s" not in text and "0.000 s" not in text


def test_links_label_series_and_split_the_recommendation(tmp_path):
    rows = _direct("s3", 1, 2.0) + _direct("s3", 1, 5.0, link="acacia") + _direct("presigned", 1, 1.0)
    labels = [s.label for s in summary.figure_series("fig2", rows)]
    assert labels == ["S3 API @ loopback", "S3 API @ acacia"]
    text = report.render(rows, {"config": {"processes": {}}}, None)
    assert "### Link `acacia`" in text and "### Link `loopback`" in text
    assert "at the largest process count, p = 1, presigned has no ok run" in text  # acacia ran s3 only
    assert "no `threads` run is recorded on link `acacia`" in text


def test_fastest_tool_may_change_with_p_and_is_named_per_point():
    rows = (_staging("s5cmd", S5CMD, 1, 0.2, 0.5) + _staging("ingest", INGEST_TOOL, 1, 0.2, 0.9)
            + _staging("s5cmd", S5CMD, 4, 1.0, 6.0) + _staging("ingest", INGEST_TOOL, 4, 1.0, 3.0))
    (series,) = summary.staging_total_series(rows)
    assert series.label == "staging total: fastest tool copy + read"
    assert series.notes == {1: S5CMD, 4: INGEST_TOOL}
    assert series.points[4].value.median == pytest.approx(4.0)
    # no direct run: the comparison figures are not drawn, and the reason names the missing method
    assert summary.figure_series("fig3", rows) == []
    assert summary.figure_absence("fig3", rows, {"processes": {"methods": ["staging"]}}) == \
        "`processes.methods` did not include `s3`"


def test_report_refuses_a_directory_without_a_database(tmp_path):
    assert cli.main(["study-report", str(tmp_path)]) == 1
    assert not os.path.exists(tmp_path / db.DB_NAME)  # refusing must not create an empty study


values = st.lists(st.one_of(st.none(), st.floats(min_value=-1e9, max_value=1e9, allow_nan=False)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(values)
def test_spread_matches_numpy(vals):
    got = summary.spread(vals)
    present = np.array([v for v in vals if v is not None], dtype=float)
    if present.size == 0:
        assert got is None
        return
    assert got.n == present.size
    assert got.median == pytest.approx(float(np.median(present)), rel=1e-12, abs=1e-6)
    assert (got.low, got.high) == (float(present.min()), float(present.max()))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(db.STATUSES), st.floats(min_value=0, max_value=1e5, allow_nan=False)),
                min_size=1, max_size=30))
def test_point_counts_failures_and_excludes_them_from_the_median(runs):
    rows = [{"status": status, "elapsed_s": sec} for status, sec in runs]
    got = summary.point(rows)
    ok = np.array([sec for status, sec in runs if status == "ok"])
    assert got.ok == ok.size and got.failed == len(runs) - ok.size
    assert got.timeout == sum(status == "timeout" for status, _ in runs)
    if ok.size == 0:
        assert got.value is None  # no ok run: missing, never zero
    else:
        assert got.value.median == pytest.approx(float(np.median(ok)), rel=1e-12, abs=1e-9)
        assert (got.value.low, got.value.high) == (ok.min(), ok.max())


def test_thread_knee_is_the_fewest_threads_within_ten_percent():
    rows = [r for r in full_rows() if r["experiment"] == "threads"]
    k = summary.thread_knee(rows)["presigned"]
    assert (k["best_t"], k["knee_t"]) == (8, 4)
    assert k["knee_s"] == pytest.approx(2.1) and k["best_s"] == pytest.approx(2.0)
