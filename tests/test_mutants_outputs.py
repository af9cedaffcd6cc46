"""The pre-stage manifest (ingest.outputs.manifest) and the cut-out job's journals and manifest
(ingest.outputs.cutouts) called directly on files in tmp_path, no MPI and no server: exact
messages, texts and the files kept on a re-run, the fast tests `bash scripts/mutation.sh
outputs/manifest outputs/cutouts` runs their mutants against (docs/testing.md). Expected values
are written out by hand; files are read back with json."""
from __future__ import annotations

import json
import locale
import os
import zlib
from types import SimpleNamespace

import pytest

from ingest.driver.cutouts.sources import CutoutSource
from ingest.errors import ConfigError
from ingest.outputs import cutouts, manifest

CUBE = {"source": "s3://b/cube.fits", "object_bytes": 1000, "etag": "e1", "last_modified": "t1"}


def message_of(call, *args):
    with pytest.raises(ConfigError) as info:
        call(*args)
    return str(info.value)


def _write_json(path, value) -> None:
    path.write_text(json.dumps(value), encoding="utf-8")


@pytest.fixture
def ascii_locale():
    """The process's locale encoding ASCII (LC_CTYPE "C"), as under a job's POSIX locale: a file
    opened without an encoding cannot read UTF-8 there."""
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    yield
    locale.setlocale(locale.LC_CTYPE, before)


# --- outputs.manifest: load_json / load / write ---

def test_path_in_and_identity_name_the_manifest_and_a_cubes_version():
    assert manifest.path_in("/out") == "/out/manifest.json"
    info = SimpleNamespace(object_bytes=5, etag="abc", last_modified=None)
    assert manifest.identity("s3://b/k", info) == {"name": "s3://b/k", "object_bytes": 5, "etag": "abc",
                                                   "last_modified": None}


def test_no_manifest_is_none_and_a_manifest_of_the_schema_is_read_back(tmp_path):
    assert manifest.load(str(tmp_path)) is None
    _write_json(tmp_path / "manifest.json", {"schema": "ingest.prestage/1", "name": "M\u00e9n"})
    assert manifest.load(str(tmp_path)) == {"schema": "ingest.prestage/1", "name": "M\u00e9n"}


def test_a_manifest_is_read_as_utf8_whatever_the_locale(tmp_path, ascii_locale):
    (tmp_path / "manifest.json").write_bytes('{"schema": "ingest.prestage/1", "name": "M\u00e9n"}'.encode())
    assert manifest.load(str(tmp_path)) == {"schema": "ingest.prestage/1", "name": "M\u00e9n"}


def test_an_unreadable_manifest_is_an_error_naming_the_file_and_the_remedy(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text("not json", encoding="utf-8")
    assert message_of(manifest.load, str(tmp_path)) == (
        f"{path}: not a readable pre-stage manifest (Expecting value: line 1 column 1 (char 0)); "
        f"use --fresh to start over")
    path.write_bytes(b'{"schema": "\xff"}')  # not UTF-8
    assert message_of(manifest.load, str(tmp_path)).startswith(f"{path}: not a readable pre-stage manifest (")
    path.unlink()
    path.mkdir()  # an OSError other than a missing file
    assert message_of(manifest.load, str(tmp_path)) == (
        f"{path}: not a readable pre-stage manifest ([Errno 21] Is a directory: '{path}'); use --fresh to start over")


@pytest.mark.parametrize("value", [[1, 2], {"schema": "ingest.prestage/2"}, {"regions": []}, "ingest.prestage/1"])
def test_a_manifest_of_another_schema_or_not_an_object_is_refused(tmp_path, value):
    _write_json(tmp_path / "manifest.json", value)
    assert message_of(manifest.load, str(tmp_path)) == (
        f"{tmp_path}/manifest.json: not a ingest.prestage/1 manifest; use --fresh to start over")


def test_load_json_takes_the_older_schemas_its_reader_names_and_no_other(tmp_path):
    path = str(tmp_path / "m.json")
    _write_json(tmp_path / "m.json", {"schema": "s/1"})
    assert manifest.load_json(path, "s/2", "thing", "fix it", older=("s/0", "s/1")) == {"schema": "s/1"}
    assert message_of(manifest.load_json, path, "s/2", "thing", "fix it") == f"{path}: not a s/2 manifest; fix it"
    assert manifest.load_json(str(tmp_path / "none.json"), "s/2", "thing", "fix it") is None


def test_write_leaves_the_manifest_with_an_indent_of_one_and_no_temporary(tmp_path, monkeypatch):
    seen = []
    real_dump = json.dump

    def dump(value, fh, **kw):  # what the directory holds while the manifest is written
        seen.append(sorted(os.listdir(tmp_path)))
        real_dump(value, fh, **kw)

    monkeypatch.setattr(json, "dump", dump)
    (tmp_path / "manifest.json").write_text("old", encoding="utf-8")
    manifest.write(str(tmp_path), {"schema": "ingest.prestage/1", "regions": [1], "name": "M\u00e9n"})
    assert seen == [["manifest.json", f"manifest.json.tmp-{os.getpid()}"]]
    assert sorted(os.listdir(tmp_path)) == ["manifest.json"]
    assert (tmp_path / "manifest.json").read_text(encoding="utf-8") == (
        '{\n "schema": "ingest.prestage/1",\n "regions": [\n  1\n ],\n "name": "M\\u00e9n"\n}')


# --- outputs.manifest: difference / check_same_job / done_regions ---

def _prestage(**change) -> dict:
    cube = {"name": "s3://b/c.fits", "object_bytes": 100, "etag": "e", "last_modified": "t"}
    doc = {"schema": "ingest.prestage/1", "cubes": {"data": dict(cube), "beams": dict(cube, name="s3://b/b.fits")},
           "layout": "subcubes", "split": [2, 1, 1],
           "regions": [{"index": 0, "box": [[0, 5]], "status": "done"},
                       {"index": 1, "box": [[5, 9]], "status": "pending"}]}
    doc.update(change)
    return doc


def test_the_same_job_is_no_difference_whatever_its_regions_status():
    new = _prestage(regions=[{"index": 0, "box": [[0, 5]], "status": "pending"},
                             {"index": 1, "box": [[5, 9]], "status": "pending"}], schema="other")
    assert manifest.difference(_prestage(), new) is None
    manifest.check_same_job("/out", _prestage(), new)  # no error


@pytest.mark.parametrize("key, old_value, new_value, words", [
    ("name", "s3://b/c.fits", "s3://b/d.fits", "data name was 's3://b/c.fits', now 's3://b/d.fits'"),
    ("object_bytes", 100, 101, "data object_bytes was 100, now 101"),
    ("etag", "e", "f", "data etag was 'e', now 'f'"),
    ("last_modified", "t", None, "data last_modified was 't', now None"),
])
def test_a_changed_data_cube_is_named_by_its_field(key, old_value, new_value, words):
    new = _prestage()
    new["cubes"]["data"][key] = new_value
    assert manifest.difference(_prestage(), new) == f"{words} (the object changed)"


def test_a_field_missing_on_one_side_is_a_change():
    new = _prestage()
    del new["cubes"]["beams"]["etag"]
    assert manifest.difference(_prestage(), new) == "beams etag was 'e', now None (the object changed)"


def test_companions_new_gone_or_changed_are_named_data_first_then_by_label():
    old, new = _prestage(), _prestage()
    new["cubes"]["mask"] = dict(new["cubes"]["data"])
    assert manifest.difference(old, new) == "companion 'mask' is new"
    assert manifest.difference(new, old) == "companion 'mask' is gone"
    del new["cubes"]["data"]
    assert manifest.difference(old, new) == "companion 'data' is gone"
    assert manifest.difference(new, old) == "companion 'data' is new"
    old, new = _prestage(), _prestage()
    for label in ("data", "beams"):
        new["cubes"][label]["etag"] = "x-" + label
    assert manifest.difference(old, new) == "data etag was 'e', now 'x-data' (the object changed)"
    new["cubes"]["data"]["etag"] = "e"
    assert manifest.difference(old, new) == "beams etag was 'e', now 'x-beams' (the object changed)"
    old["cubes"]["alpha"] = dict(old["cubes"]["beams"], etag="a0")
    new["cubes"]["alpha"] = dict(old["cubes"]["beams"], etag="a1")  # sorted before beams
    assert manifest.difference(old, new) == "alpha etag was 'a0', now 'a1' (the object changed)"


def test_layout_split_and_regions_are_named_in_that_order_after_the_cubes():
    regions = [{"index": 0, "box": [[0, 9]], "status": "pending"}]
    assert manifest.difference(_prestage(), _prestage(layout="one-file", split=[1, 1, 2], regions=regions)) == (
        "layout was 'subcubes', now 'one-file'")
    assert manifest.difference(_prestage(), _prestage(split=[1, 1, 2], regions=regions)) == (
        "the split was [2, 1, 1], now [1, 1, 2]")
    assert manifest.difference(_prestage(), _prestage(regions=regions)) == "the regions differ (2 before, 1 now)"
    moved = [{"index": 0, "box": [[0, 4]], "status": "done"}, {"index": 1, "box": [[4, 9]], "status": "pending"}]
    assert manifest.difference(_prestage(), _prestage(regions=moved)) == "the regions differ (2 before, 2 now)"
    new = _prestage(layout="one-file")
    new["cubes"]["data"]["etag"] = "f"
    assert manifest.difference(_prestage(), new) == "data etag was 'e', now 'f' (the object changed)"


def test_check_same_job_refuses_another_job_naming_the_manifest_and_the_difference():
    assert message_of(manifest.check_same_job, "/out", _prestage(), _prestage(split=[1, 2, 1])) == (
        "/out/manifest.json: written for another pre-stage: the split was [2, 1, 1], now [1, 2, 1]. "
        "Nothing was changed; use --fresh to start over, or another --output-dir")


def test_done_regions_are_the_indices_of_the_regions_done():
    regions = [{"index": 3, "status": "done"}, {"index": 1, "status": "pending"}, {"index": 0, "status": "done"},
               {"index": 2, "status": "failed"}]
    assert manifest.done_regions({"regions": regions}) == [3, 0]
    assert manifest.done_regions({"regions": []}) == []


# --- outputs.cutouts: file_crc32 / Journal ---

def test_file_crc32_sums_every_chunk_of_the_file_and_is_none_for_a_missing_one(tmp_path, monkeypatch):
    path = tmp_path / "a.fits"
    path.write_bytes(b"hello world")
    assert cutouts.file_crc32(str(path)) == 222957957
    monkeypatch.setattr(cutouts, "_READ_BYTES", 4)  # three chunks, summed one after the other
    assert cutouts.file_crc32(str(path)) == 222957957
    path.write_bytes(b"")
    assert cutouts.file_crc32(str(path)) == 0
    assert cutouts.file_crc32(str(tmp_path / "gone.fits")) is None


def test_a_journal_line_is_one_entry_written_whole_before_its_fsync(tmp_path, monkeypatch):
    path = tmp_path / ".cutouts-rank3.jsonl"
    path.write_text('{"file": "old.fits"}\n', encoding="utf-8")  # an earlier run's line: appended to
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append((os.fstat(fd).st_ino == path.stat().st_ino, path.read_text(encoding="utf-8")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    journal = cutouts.Journal(str(tmp_path), 3)
    assert journal.path == str(path)
    journal.add([{"file": "a.fits", "crc32": 1, "name": "M\u00e9n"}, {"file": "b.fits", "crc32": 2}])
    lines = ('{"file": "old.fits"}\n{"file": "a.fits", "crc32": 1, "name": "M\\u00e9n"}\n'
             '{"file": "b.fits", "crc32": 2}\n')
    assert synced == [(True, lines)]  # one fsync for the batch, every line already in the file
    journal.add([{"file": "c.fits", "crc32": 3}])
    assert synced[1] == (True, lines + '{"file": "c.fits", "crc32": 3}\n')
    journal.close()
    assert [json.loads(line)["file"] for line in path.read_text().splitlines()] == ["old.fits", "a.fits", "b.fits",
                                                                                     "c.fits"]


# --- outputs.cutouts: load / check_cube / finished ---

def _entry(file, data: bytes | None, request="r1", **extra) -> dict:
    """A manifest or journal line for `file` as it was when its bytes were `data`."""
    crc = zlib.crc32(data) if data is not None else 12345
    return {"name": file.split(".")[0], "row": 0, "status": "done", "file": file, "bytes": 0, "crc32": crc,
            "request": request, **extra}


def _cutout_manifest(sources, schema="ingest.cutouts/2", cube=CUBE) -> dict:
    return {"schema": schema, "cube": dict(cube), "sources": sources}


def test_a_cutout_manifest_of_another_schema_or_unreadable_is_an_error_naming_it(tmp_path):
    path = tmp_path / "manifest.json"
    assert cutouts.load(str(tmp_path)) is None
    _write_json(path, {"schema": "ingest.prestage/1"})
    assert message_of(cutouts.load, str(tmp_path)) == (
        f"{path}: not a ingest.cutouts/2 manifest; remove it or choose another --output-dir")
    path.write_text("{", encoding="utf-8")
    assert message_of(cutouts.load, str(tmp_path)) == (
        f"{path}: not a readable cut-out manifest (Expecting property name enclosed in double quotes: "
        f"line 1 column 2 (char 1)); remove it or choose another --output-dir")
    for schema in ("ingest.cutouts/1", "ingest.cutouts/2"):
        _write_json(path, {"schema": schema})
        assert cutouts.load(str(tmp_path)) == {"schema": schema}


@pytest.mark.parametrize("key, value, words", [
    ("object_bytes", 1001, "object_bytes was 1000, now 1001"),
    ("etag", "e2", "etag was 'e1', now 'e2'"),
    ("last_modified", None, "last_modified was 't1', now None"),
])
def test_check_cube_refuses_another_version_naming_the_field(key, value, words):
    assert message_of(cutouts.check_cube, {"cube": CUBE}, dict(CUBE, **{key: value}), "DIR/manifest.json") == (
        f"DIR/manifest.json: cut from another version of the cube ({words}); "
        f"choose another destination or remove the old cut-outs")


def test_check_cube_takes_the_same_version_and_refuses_a_manifest_without_a_cube():
    cutouts.check_cube({"cube": CUBE}, dict(CUBE, source="s3://b/renamed.fits"), "M")  # the name is no version
    assert message_of(cutouts.check_cube, {}, CUBE, "M") == (
        "M: cut from another version of the cube (object_bytes was None, now 1000); "
        "choose another destination or remove the old cut-outs")


def test_finished_keeps_the_files_whose_crc_still_matches_the_journal_over_the_manifest(tmp_path):
    files = {"a.fits": b"aaa", "b.fits": b"bbb", "c.h5": b"ccc", "e.fits": b"eee"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    _write_json(tmp_path / "manifest.json", _cutout_manifest([
        _entry("a.fits", b"aaa", "old"),
        _entry("b.fits", b"changed"),  # the file changed since: cut again
        {"name": "s", "row": 4, "status": "skipped", "reason": "outside the cube", "region": ""},
        _entry("d.fits", b"ddd"),  # the file is gone
        _entry("e.fits", b"eee", status="failed"),  # only a done entry counts
    ]))
    (tmp_path / ".cutouts-rank0.jsonl").write_text(
        json.dumps(_entry("a.fits", b"aaa", "new")) + "\n" + '{"file": "c.h5", "crc' + "\n"  # a line cut by a crash
        + json.dumps(_entry("c.h5", b"ccc")) + "\n", encoding="utf-8")
    (tmp_path / ".cutouts-rank1.jsonl").write_text(json.dumps(_entry("b.fits", b"bb")) + "\n", encoding="utf-8")
    found = cutouts.finished(str(tmp_path), CUBE)
    assert found == {"a.fits": _entry("a.fits", b"aaa", "new"), "c.h5": _entry("c.h5", b"ccc")}


def test_finished_reads_the_journals_alone_and_a_manifest_without_sources(tmp_path):
    (tmp_path / "a.fits").write_bytes(b"aaa")
    assert cutouts.finished(str(tmp_path), CUBE) == {}
    (tmp_path / ".cutouts-rank12.jsonl").write_text(json.dumps(_entry("a.fits", b"aaa")) + "\n", encoding="utf-8")
    assert cutouts.finished(str(tmp_path), CUBE) == {"a.fits": _entry("a.fits", b"aaa")}
    _write_json(tmp_path / "manifest.json", {"schema": "ingest.cutouts/2", "cube": CUBE})
    assert cutouts.finished(str(tmp_path), CUBE) == {"a.fits": _entry("a.fits", b"aaa")}


def test_a_journal_is_read_as_utf8_whatever_the_locale(tmp_path, ascii_locale):
    (tmp_path / "a.fits").write_bytes(b"aaa")
    (tmp_path / ".cutouts-rank0.jsonl").write_bytes(
        (json.dumps(_entry("a.fits", b"aaa", name="M\u00e9n"), ensure_ascii=False) + "\n").encode())
    assert cutouts.finished(str(tmp_path), CUBE) == {"a.fits": _entry("a.fits", b"aaa", name="M\u00e9n")}


def test_finished_refuses_a_manifest_of_another_cube_naming_it(tmp_path):
    _write_json(tmp_path / "manifest.json", _cutout_manifest([], cube=dict(CUBE, etag="e0")))
    assert message_of(cutouts.finished, str(tmp_path), CUBE) == (
        f"{tmp_path}/manifest.json: cut from another version of the cube (etag was 'e0', now 'e1'); "
        f"choose another destination or remove the old cut-outs")


def test_finished_removes_the_cutouts_a_killed_run_left_under_temporary_names(tmp_path):
    names = [".a.fits.tmp-12", ".b.h5.tmp-3", ".c.tmp-1.fits.tmp-4",  # cut-outs never renamed
             "..fits.tmp-9", "..h5.tmp-9",  # and of an empty stem: NAME ".fits"
             ".notes.txt.tmp-5", ".d.fitsx.tmp-1", "e.fits.tmp-6", ".fits.tmp-7", "manifest.json.tmp-8",
             ".cutouts-rank0.jsonl"]
    for name in names:
        (tmp_path / name).write_text("", encoding="utf-8")
    assert cutouts.finished(str(tmp_path), CUBE) == {}
    assert sorted(os.listdir(tmp_path)) == sorted(names[5:])


# --- outputs.cutouts: resume ---

def _source(stem, row, request="r1", box=((0, 2), (0, 2))) -> CutoutSource:
    return CutoutSource(name=stem, file_stem=stem, row=row, box=box, request=request)


def test_resume_keeps_a_whole_file_of_the_same_request_and_recuts_a_changed_request():
    found = {"a.fits": _entry("a.fits", b"a"), "b.fits": _entry("b.fits", b"b"), "c.fits": _entry("c.fits", b"c"),
             "d.h5": _entry("d.h5", b"d"), "z.fits": _entry("z.fits", b"z")}
    sources = [_source("a", 7), _source("b", 8, request="r2"), _source("c", 9, request="r3"),
               _source("d", 10), _source("new", 11), _source("skipped", 12, box=None), _source("c", 13)]
    todo, kept, n_recut = cutouts.resume(sources, found, ".fits")
    assert todo == [1, 2, 3, 4]
    assert kept == [dict(_entry("a.fits", b"a"), row=7), dict(_entry("c.fits", b"c"), row=13)]
    assert n_recut == 2  # b and c's requests changed; d's file has another extension; new was never cut


def test_resume_recuts_every_file_of_a_cutouts_1_manifest_which_recorded_no_request(tmp_path):
    (tmp_path / "a.fits").write_bytes(b"aaa")
    old = {k: v for k, v in _entry("a.fits", b"aaa").items() if k != "request"}
    _write_json(tmp_path / "manifest.json", _cutout_manifest([old], schema="ingest.cutouts/1"))
    found = cutouts.finished(str(tmp_path), CUBE)
    assert found == {"a.fits": old}
    assert cutouts.resume([_source("a", 0)], found, ".fits") == ([0], [], 1)
    assert cutouts.resume([_source("a", 0, request=None)], {"a.fits": _entry("a.fits", b"aaa", None)},
                          ".fits") == ([0], [], 1)  # no request of this run: not kept either


# --- outputs.cutouts: write_manifest / manifest_text ---

def test_manifest_text_is_the_head_indented_then_one_line_per_source_last():
    doc = {"sources": [{"name": "M\u00e9n", "row": 1}, {"name": "b", "row": 2}], "schema": "ingest.cutouts/2",
           "cube": {"object_bytes": 10}}
    assert cutouts.manifest_text(doc) == (
        '{\n "schema": "ingest.cutouts/2",\n "cube": {\n  "object_bytes": 10\n },\n "sources": [\n'
        '  {"name": "M\\u00e9n", "row": 1},\n  {"name": "b", "row": 2}\n ]\n}\n')
    assert cutouts.manifest_text({"sources": [{"row": 1}]}) == '{\n "sources": [\n  {"row": 1}\n ]\n}\n'
    assert cutouts.manifest_text({}) == '{\n "sources": [\n\n ]\n}\n'
    assert json.loads(cutouts.manifest_text({"schema": "s"})) == {"schema": "s", "sources": []}


def test_write_manifest_writes_it_whole_then_removes_the_journals(tmp_path, monkeypatch):
    seen = []
    real_text = cutouts.manifest_text

    def text(doc):  # what the directory holds while the manifest is written
        seen.append(sorted(os.listdir(tmp_path)))
        return real_text(doc)

    monkeypatch.setattr(cutouts, "manifest_text", text)
    for name in (".cutouts-rank0.jsonl", ".cutouts-rank11.jsonl", "a.fits", ".cutouts-notes.txt"):
        (tmp_path / name).write_text("x\n", encoding="utf-8")
    doc = _cutout_manifest([_entry("a.fits", b"x\n")])
    assert cutouts.write_manifest(str(tmp_path), doc) == f"{tmp_path}/manifest.json"
    assert seen == [[".cutouts-notes.txt", ".cutouts-rank0.jsonl", ".cutouts-rank11.jsonl", "a.fits",
                     f"manifest.json.tmp-{os.getpid()}"]]
    assert sorted(os.listdir(tmp_path)) == [".cutouts-notes.txt", "a.fits", "manifest.json"]
    assert json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8")) == doc


# --- outputs.cutouts: summary_text ---

def _report(**totals) -> dict:
    t = {"sources": 210, "done": 200, "kept": 4, "skipped": 6, "requests": 37, "bytes_wire": 123456,
         "bytes_needed": 100000, "requests_per_source": 0.1851, "bytes_wire_per_source": 617.28}
    t.update(totals)
    return {"totals": t, "makespan_s": 1.23456, "ranks": [{}, {}], "plan": {"choice": "split on z"}}


def test_summary_text_says_what_was_cut_kept_skipped_and_read():
    assert cutouts.summary_text(_report(recut=200, new=0)) == (
        "cutouts: 200 cut (200 re-cut: request changed, 0 new), 4 kept from an earlier run, 6 skipped "
        "of 210 sources in 1.235 s on 2 ranks\n"
        "  read: 37 requests, 123456 bytes on the wire for 100000 needed (0.19 requests, 617 bytes per source)\n"
        "  plan: split on z")
    assert cutouts.summary_text(_report()).splitlines()[0] == (
        "cutouts: 200 cut, 4 kept from an earlier run, 6 skipped of 210 sources in 1.235 s on 2 ranks")


def test_summary_text_counts_the_five_commonest_skip_reasons_and_the_clipped():
    reasons = ["far"] * 2 + ["bad"] * 4 + ["nan"] + ["edge"] * 3 + ["dup"] + ["odd"]
    report = dict(_report(), skipped=[{"reason": r, "name": "s"} for r in reasons], clipped=3)
    assert cutouts.summary_text(report).splitlines()[3:] == [
        "  skipped 4: bad", "  skipped 3: edge", "  skipped 2: far", "  skipped 1: nan", "  skipped 1: dup",
        "  clipped to the cube: 3 cut-outs"]
    assert len(cutouts.summary_text(dict(_report(), clipped=0)).splitlines()) == 3
