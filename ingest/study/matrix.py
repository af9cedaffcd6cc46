"""The study's matrix, pure: config -> cells (what to run, with which ingest options) -> the
interleaved schedule. No I/O, so what a study will run is testable and printable up front.

Weak scaling as seed 001 ran it: the cube is split once into B boxes (B = the largest rank
count unless `study.boxes` says otherwise) and a p-rank run reads the first p of them, one per
rank (`run --grid G --take-regions p`), so every rank's share is the same size at every p.
Strong scaling splits the whole cube over the p ranks instead.

Repeats are interleaved: round 1 runs every cell once, then round 2, ... so drift of a shared
machine or store over the hours of a study hits every cell alike rather than the last ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ingest.errors import ConfigError
from ingest.study.config import StudyConfig
from ingest.units import format_bytes, parse_bytes


@dataclass(frozen=True)
class Cell:
    """One point of the matrix: run `repeats` times, each a real job."""

    name: str  # experiment/axis values, e.g. processes/s3/p8 (the database key with the repeat)
    experiment: str
    kind: str  # run | stage (ingest commands under the launcher) | libraries (one plain process)
    ranks: int
    repeats: int
    args: tuple[str, ...] = ()  # the ingest command and its options, without source/report/progress
    params: dict = field(default_factory=dict)  # what the report groups by (method, threads, link, ...)

    @property
    def method(self) -> str | None:
        return self.params.get("method")

    @property
    def link(self) -> str:
        return self.params.get("link", "loopback")


def weak_scaling_take(ranks: int, boxes: int) -> int:
    """How many of the B boxes a weak-scaling run with `ranks` processes reads: one per rank."""
    if not 1 <= ranks <= boxes:
        raise ConfigError(f"processes.ranks: {ranks} is not in 1..{boxes} (weak scaling reads one of the "
                          f"{boxes} boxes per process; raise study.boxes or lower the rank count)")
    return ranks


def default_boxes(cfg: StudyConfig) -> int:
    """B: study.boxes, else the largest rank count any experiment launches (at least 1)."""
    if cfg.study["boxes"] is not None:
        return cfg.study["boxes"]
    counts = [1]
    if "processes" in cfg.experiments:
        counts += cfg.experiments["processes"]["ranks"]
    if "layout" in cfg.experiments:
        counts.append(cfg.experiments["layout"]["parallel_ranks"])
    return max(counts)


def _box_args(grid: str, take: int | None) -> tuple[str, ...]:
    return ("--grid", grid) + (("--take-regions", str(take)) if take is not None else ())


def _processes(cfg: StudyConfig, table: dict, grid: str, boxes: int, stage_tools: list[str]) -> list[Cell]:
    threads = table["threads"] or cfg.study["threads"]
    cells = []
    for p in table["ranks"]:
        box = _box_args(grid, weak_scaling_take(p, boxes)) if table["scaling"] == "weak" else ("--grid", "auto")
        common = {"ranks": p, "threads": threads, "scaling": table["scaling"]}
        for method in table["methods"]:
            if method != "staging":
                cells.append(Cell(f"processes/{method}/p{p}", "processes", "run", p, 0,
                                  ("run", "--method", method, "--threads", str(threads)) + box,
                                  {"method": method, **common}))
                continue
            for tool in stage_tools:  # the staged copy made by each tool a centre might use
                cells.append(Cell(f"processes/staging-{tool}/p{p}", "processes", "stage", p, 0,
                                  ("stage", "--method", "s3", "--stage-with", tool, "--threads", str(threads)) + box,
                                  {"method": "staging", "stage_with": tool, **common}))
    return cells


def _single(cfg: StudyConfig, name: str, table: dict, grid: str) -> list[Cell]:
    """The one-process experiments, each reading the first box as seed 001's single instance did."""
    box = _box_args(grid, 1)
    threads = str(cfg.study["threads"])
    if name == "threads":
        m = table["method"]
        return [Cell(f"threads/{m}/t{t}", name, "run", 1, 0, ("run", "--method", m, "--threads", str(t)) + box,
                     {"method": m, "ranks": 1, "threads": t}) for t in table["threads"]]
    if name == "strategies":
        m = table["method"]
        return [Cell(f"strategies/{m}/{s}", name, "run", 1, 0,
                     ("run", "--method", m, "--strategy", s, "--threads", threads) + box,
                     {"method": m, "strategy": s, "ranks": 1, "threads": int(threads)}) for s in table["strategies"]]
    if name == "order":
        m, s = table["method"], table["strategy"]
        return [Cell(f"order/{m}/{o}", name, "run", 1, 0,
                     ("run", "--method", m, "--strategy", s, "--order", o, "--threads", threads) + box,
                     {"method": m, "strategy": s, "order": o, "ranks": 1, "threads": int(threads)})
                for o in table["orders"]]
    if name == "stability":
        return [Cell(f"stability/{m}", name, "run", 1, 0, ("run", "--method", m, "--threads", threads) + box,
                     {"method": m, "ranks": 1, "threads": int(threads)}) for m in table["methods"]]
    raise ValueError(name)


def _layout(cfg: StudyConfig, table: dict, grid: str) -> list[Cell]:
    """Every box of the split, read from the one object by ranges or as one object per box
    (the runner swaps in the tile index as the source), one after another or in parallel."""
    m, cells = table["method"], []
    for layout in ("ranged", "tiled"):
        for access in table["access"]:
            ranks, threads = (1, 1) if access == "sequential" else (table["parallel_ranks"], cfg.study["threads"])
            cells.append(Cell(f"layout/{layout}/{access}", "layout", "run", ranks, 0,
                              ("run", "--method", m, "--threads", str(threads), "--grid", grid),
                              {"method": m, "layout": layout, "access": access, "ranks": ranks, "threads": threads}))
    return cells


def _libraries(table: dict) -> list[Cell]:
    cells = []
    for chunk in table["chunk_bytes"]:
        chunk_bytes = parse_bytes(chunk, "libraries.chunk_bytes")
        for cache in table["cache"]:
            for lib in table["libraries"]:
                cells.append(Cell(f"libraries/{lib}/{format_bytes(chunk_bytes).replace(' ', '')}/{cache}",
                                  "libraries", "libraries", 1, 0, (),
                                  {"library": lib, "chunk_bytes": chunk_bytes, "cache": cache, "ranks": 1}))
    return cells


def build_cells(cfg: StudyConfig, *, grid: str, boxes: int, stage_tools: list[str]) -> list[Cell]:
    """Every cell of the study, experiments in the config's order, each over its link profiles.
    grid: the split into B boxes (FITS order, as --grid takes it); stage_tools: the staging
    tools to time (those installed, or the config's list)."""
    cells: list[Cell] = []
    for name, table in cfg.experiments.items():
        if name == "processes":
            made = _processes(cfg, table, grid, boxes, stage_tools)
        elif name == "layout":
            made = _layout(cfg, table, grid)
        elif name == "libraries":
            made = _libraries(table)
        else:
            made = _single(cfg, name, table, grid)
        links = cfg.links_for(name)
        repeats = cfg.repeats(name)
        for link in links:
            suffix = f"@{link}" if len(links) > 1 else ""
            cells += [Cell(c.name + suffix, c.experiment, c.kind, c.ranks, repeats, c.args, {**c.params, "link": link})
                      for c in made]
    names = [c.name for c in cells]
    if len(set(names)) != len(names):
        raise ConfigError(f"study: two cells share a name: {sorted({n for n in names if names.count(n) > 1})}")
    return cells


def schedule(cells: list[Cell]) -> list[tuple[int, Cell, int]]:
    """(seq, cell, repeat) in the order they run: round r runs every cell with at least r repeats."""
    out: list[tuple[int, Cell, int]] = []
    for repeat in range(1, max((c.repeats for c in cells), default=0) + 1):
        for cell in cells:
            if cell.repeats >= repeat:
                out.append((len(out), cell, repeat))
    return out
