"""The study's matrix, pure: config checks, weak-scaling boxes, interleaved repeats, cell names."""
import pytest
from hypothesis import given, strategies as st

from ingest.errors import ConfigError
from ingest.study.config import parse_config
from ingest.study.matrix import build_cells, default_boxes, schedule, weak_scaling_take
from ingest.study.setting import MPIEXEC_TEMPLATE, SRUN_TEMPLATE, launcher_argv, launcher_template

BASE = '[study]\nsource = "s3://b/cube.fits"\n'


def cells_of(text, grid="1x1x4", stage_tools=("ingest",)):
    cfg = parse_config(BASE + text)
    return cfg, build_cells(cfg, grid=grid, boxes=default_boxes(cfg), stage_tools=list(stage_tools))


@given(st.integers(1, 64), st.data())
def test_weak_scaling_reads_one_box_per_rank_of_b(boxes, data):
    ranks = data.draw(st.integers(1, boxes))
    assert weak_scaling_take(ranks, boxes) == ranks


def test_weak_scaling_beyond_b_names_the_setting():
    with pytest.raises(ConfigError, match=r"processes.ranks: 26 is not in 1..25"):
        weak_scaling_take(26, 25)


def test_processes_cells_weak_scaling_take_p_of_b_with_one_grid():
    cfg, cells = cells_of('[processes]\nranks = [1, 4, 8]\nmethods = ["presigned", "staging"]\n',
                          stage_tools=("ingest", "s5cmd"))
    assert default_boxes(cfg) == 8  # B = the largest rank count
    by_name = {c.name: c for c in cells}
    assert sorted(by_name) == sorted(f"processes/{m}/p{p}" for p in (1, 4, 8)
                                     for m in ("presigned", "staging-ingest", "staging-s5cmd"))
    p4 = by_name["processes/presigned/p4"]
    assert p4.ranks == 4 and p4.args[:3] == ("run", "--method", "presigned")
    assert p4.args[-4:] == ("--grid", "1x1x4", "--take-regions", "4")
    s5 = by_name["processes/staging-s5cmd/p8"]
    assert s5.kind == "stage" and "--stage-with" in s5.args and s5.params["stage_with"] == "s5cmd"
    assert all(c.repeats == 3 and c.link == "loopback" for c in cells)


def test_strong_scaling_splits_the_whole_cube_over_p():
    _, cells = cells_of('[processes]\nranks = [2]\nmethods = ["s3"]\nscaling = "strong"\n')
    assert cells[0].args[-2:] == ("--grid", "auto") and "--take-regions" not in cells[0].args


def test_schedule_interleaves_repeats_and_lets_stability_run_longer():
    cfg, cells = cells_of('repeats = 2\n[threads]\nthreads = [1, 2]\n[stability]\nruns = 3\nmethods = ["s3"]\n')
    order = [(c.name, r) for _, c, r in schedule(cells)]
    assert order == [("threads/presigned/t1", 1), ("threads/presigned/t2", 1), ("stability/s3", 1),
                     ("threads/presigned/t1", 2), ("threads/presigned/t2", 2), ("stability/s3", 2),
                     ("stability/s3", 3)]
    assert [seq for seq, _, _ in schedule(cells)] == list(range(7))


def test_links_axis_multiplies_only_the_named_experiments():
    _, cells = cells_of('[threads]\nthreads = [1]\n[strategies]\nstrategies = ["auto"]\n'
                        '[links]\nprofiles = ["loopback", "acacia"]\nexperiments = ["threads"]\n')
    assert sorted(c.name for c in cells) == ["strategies/presigned/auto", "threads/presigned/t1@acacia",
                                             "threads/presigned/t1@loopback"]
    assert {c.link for c in cells if c.experiment == "threads"} == {"loopback", "acacia"}


def test_libraries_and_layout_cells():
    _, cells = cells_of('[libraries]\nlibraries = ["urllib3", "ingest"]\nchunk_bytes = ["1MiB"]\ncache = ["cached"]\n'
                        '[layout]\nparallel_ranks = 2\n')
    names = sorted(c.name for c in cells)
    assert names == ["layout/ranged/parallel", "layout/ranged/sequential", "layout/tiled/parallel",
                     "layout/tiled/sequential", "libraries/ingest/1MiB/cached", "libraries/urllib3/1MiB/cached"]
    seq = next(c for c in cells if c.name == "layout/tiled/sequential")
    assert seq.ranks == 1 and seq.params["threads"] == 1
    assert next(c for c in cells if c.name == "layout/ranged/parallel").ranks == 2


@pytest.mark.parametrize("text, message", [
    ("", "no experiment table"),
    ("[procesess]\nranks = [1]\n", r"\[procesess\] is not a study table \(did you mean 'processes'\?\)"),
    ("[processes]\nrank = [1]\n", r"processes.rank: not a setting of \[processes\] \(did you mean 'ranks'\?\)"),
    ("[processes]\nranks = [0]\n", r"processes.ranks: expected a non-empty list of whole numbers >= 1"),
    ("[processes]\nranks = [1]\nmethods = [\"presgned\"]\n", r"processes.methods: 'presgned' is not one of"),
    ("[threads]\nmethod = \"staging\"\n", r"threads.method: 'staging' is not one of presigned, s3"),
    ("[libraries]\nchunk_bytes = [\"lots\"]\n", r"libraries.chunk_bytes: cannot read 'lots' as a byte count"),
    ("[links]\nprofiles = [\"mars\"]\n[threads]\n", r"links.profiles: 'mars' is not one of"),
])
def test_bad_config_names_table_and_key(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(BASE + text)


def test_source_or_embedded_exactly_one():
    with pytest.raises(ConfigError, match="study.source: give the cube"):
        parse_config('[study]\n[threads]\n')
    with pytest.raises(ConfigError, match="study.source: give the cube"):
        parse_config(BASE + '[study.embedded]\n[threads]\n')
    with pytest.raises(ConfigError, match=r"study.source: 'https://x/y' is not s3://bucket/key"):
        parse_config('[study]\nsource = "https://x/y"\n[threads]\n')
    cfg = parse_config('[study]\n[study.embedded]\nshape = "8x8x4"\n[threads]\n')
    assert cfg.embedded["shape"] == "8x8x4" and cfg.study["source"] is None


def test_launcher_srun_inside_an_allocation_else_mpiexec(monkeypatch, tmp_path):
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert launcher_template("auto", {"SLURM_JOB_ID": "7"}) == SRUN_TEMPLATE
    assert launcher_template("auto", {}) == MPIEXEC_TEMPLATE
    assert launcher_argv(SRUN_TEMPLATE, 4) == ["srun", "--ntasks=4"]
    assert launcher_argv("srun -n {ranks} -N {ranks}", 3) == ["srun", "-n", "3", "-N", "3"]
    with pytest.raises(ConfigError, match=r"study.launcher: 'srun -n 4' has no \{ranks\}"):
        launcher_template("srun -n 4")


def test_shipped_configs_are_valid():
    import os

    from ingest.study.config import load_config
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    acacia = load_config(os.path.join(root, "configs", "study-acacia.toml"))
    assert acacia.experiments["processes"]["ranks"] == [1, 4, 8, 16, 25] and acacia.study["boxes"] == 25
    local = load_config(os.path.join(root, "configs", "study-local.toml"))
    assert local.embedded["bitpix"] == -32 and set(local.experiments) == {
        "processes", "threads", "strategies", "libraries", "order", "layout", "stability"}
    with pytest.raises(ConfigError, match=r"study.embedded.bitpix: expected a FITS BITPIX"):
        parse_config('[study]\n[study.embedded]\nbitpix = 12\n[threads]\n')
