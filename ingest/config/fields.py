"""`RunConfig`, the field table of the one configuration: each field once, with its default and
its metadata (help, unit, kind, limits, the commands whose command line offers it), from which
the command-line options (ingest.config.arguments), the TOML keys (ingest.config.run) and the
error messages (ingest.config.checks) are all made.

Rules: a RunConfig is frozen, every field checked on construction and the rules between fields
after (`_check_together`), so a RunConfig that exists is valid; it is picklable, so rank 0
resolves it once and broadcasts it; its repr and report never show a presigned URL's query.
Over 300 lines because the table is one: a field's help, unit and limits stay beside its name.
"""
from __future__ import annotations

import difflib
from dataclasses import MISSING, asdict, dataclass, field, fields

from ingest.config.checks import check_value, shown_source, source_form
from ingest.core.parts import MAX_PART_BYTES, MIN_PART_BYTES
from ingest.errors import ConfigError
from ingest.redact import redact_url
from ingest.transports.presign import MAX_EXPIRES_S
from ingest.transports.retry import RetryPolicy

# The commands that offer a field on their command line (a config file may set any field):
JOBS = ("run", "stage", "prestage")  # MPI jobs: every setting
PLANNERS = JOBS + ("plan",)  # + how a read is split, planned and tuned
REGION_TAKERS = PLANNERS + ("info",)  # + how the object is opened and read
CUTOUTS = ("cutouts",)  # a catalogue's sources cut out: opened, read and tuned like a job, no grid
OPENERS = REGION_TAKERS + CUTOUTS
TUNERS = PLANNERS + CUTOUTS  # how requests are sized, merged and kept in flight
LAYOUTS = ("frame", "frame-per-rank", "subcubes")
# The openssl layer under urllib3 reads at most 2**31 - 1 bytes at once (seed 001 s7.2).
_MAX_REQUEST_BYTES = 2**31 - 1


def _opt(default=MISSING, *, help: str, unit: str = "", kind: str = "str", low=None, high=None,
         low_open: bool = False, choices: tuple[str, ...] = (), shown_default: str | None = None,
         commands: tuple[str, ...] = JOBS, command_defaults: dict | None = None):
    """A RunConfig field: default plus what the CLI, the TOML reader and the checks need.
    `commands`: the commands whose command line offers it (a config file may set any field);
    `command_defaults`: a different default for some of them ({"plan": False})."""
    meta = {"help": help, "unit": unit, "kind": kind, "low": low, "high": high, "low_open": low_open,
            "choices": choices, "shown_default": shown_default, "commands": commands,
            "command_defaults": command_defaults or {}}
    return field(default=default, metadata=meta)


@dataclass(frozen=True, repr=False)
class RunConfig:
    """Everything one `ingest run` needs; see each field's help. Construct via `load_config`."""

    source: str = _opt(commands=OPENERS + ("publish",), help="FITS or HDF5 object: local path, http(s) presigned URL or s3://bucket/key (required)",
                       unit="path or URL")
    method: str = _opt("auto", commands=OPENERS, kind="choice", choices=("auto", "presigned", "s3", "posix"),
                       help="how to read the source; auto: s3:// -> s3, http(s):// -> presigned, else posix")
    engine: str = _opt("auto", commands=OPENERS, kind="choice", choices=("auto", "native", "urllib3"),
                       help="what issues the HTTP requests: native (libcurl via pycurl, many in flight from one "
                            "thread), urllib3 (urllib3 and boto3, a thread per request); auto: native when installed")
    endpoint_url: str | None = _opt(None, commands=OPENERS + ("publish",), unit="URL", kind="path",
                                    help="S3 endpoint, e.g. https://projects.pawsey.org.au", shown_default="boto3's chain")
    threads: int | None = _opt(None, commands=TUNERS, unit="threads", kind="int", low=1, high=1024,
                               help="concurrent range requests per rank",
                               shown_default="auto: tuned by the probe, else 4")
    chunk_bytes: int | None = _opt(None, commands=TUNERS, unit="bytes", kind="bytes", low=1, high=_MAX_REQUEST_BYTES,
                                   help="largest single range request; accepts 16MiB, 1GiB, 500kB",
                                   shown_default="auto: tuned by the probe, else 16 MiB")
    probe: bool = _opt(True, commands=TUNERS, command_defaults={"plan": False}, kind="bool",
                       help="with strategy auto, measure latency and bandwidth first and tune gap, "
                            "request size and threads (rank 0 probes once and broadcasts)")
    strategy: str = _opt("auto", commands=TUNERS, kind="choice", choices=("auto", "large", "intermediate", "small"),
                         help="request strategy (seed 001 s7.4); auto merges gaps up to max_gap_bytes")
    max_gap_bytes: int | None = _opt(None, commands=TUNERS, unit="bytes", kind="bytes", low=0,
                                     help="merge runs separated by at most this many unwanted bytes",
                                     shown_default="latency_s x bandwidth_bytes_per_s")
    latency_s: float = _opt(0.002, commands=TUNERS + ("publish",), unit="s", kind="float", low=0.0,
                            help="cost model: time per request (seed 001: ~2 ms on Acacia)")
    bandwidth_bytes_per_s: float = _opt(75e6, commands=TUNERS + ("publish",), unit="bytes/s", kind="rate", low=0.0, low_open=True,
                                        help="cost model: bandwidth per rank (75e6 = 600 Mbit/s); accepts 75MB")
    cpu_per_request_s: float = _opt(0.0, commands=TUNERS, unit="s", kind="float", low=0.0,
                                    help="cost model: client CPU per request (BENCHMARKS.md: ~0.0001 native, "
                                         "~0.0004 urllib3, ~0.001 boto3); a probe or the header request measures it",
                                    shown_default="0, or what the header request took")
    max_in_flight: int | None = _opt(None, commands=TUNERS, unit="requests", kind="int", low=1, high=1024,
                                     help="most requests the tuner may keep in flight at once",
                                     shown_default="64 on the native engine, else 16")
    grid: str = _opt("auto", commands=PLANNERS, unit="parts per axis, FITS order", kind="grid",
                     help="rank grid 'PXxPYxPZ' (x first), or auto: split the slowest axes first")
    halo: int = _opt(0, commands=PLANNERS, unit="pixels", kind="int", low=0,
                     help="extra pixels each box reads into each neighbouring box")
    region_shape: str | None = _opt(None, commands=PLANNERS, unit="pixels WxHxD, FITS order", kind="region_shape",
                                    help="split the job into regions of this shape by WALLABY's s2p_setup rule "
                                         "(e.g. 1500x1500x1400) instead of --grid", shown_default="use grid")
    min_overlap: str | None = _opt(None, commands=PLANNERS, unit="pixels SPATIAL,SPECTRAL", kind="overlap",
                                   help="with region_shape: least overlap of neighbouring regions (s2p_setup's "
                                        "min_overlap_spat, min_overlap_spec)", shown_default="0,0")
    take_regions: int | None = _opt(None, unit="regions", kind="int", low=1,
                                    help="read only the first N regions of the split (weak scaling, as seed 001: the "
                                         "cube split into B boxes, a p-rank run reads p of them)",
                                    shown_default="every region")
    order: str = _opt("sequential", kind="choice", choices=("sequential", "random"),
                      help="the order requests are issued in: file order, or a random permutation of the same "
                           "requests (seed 000's access-order experiment)")
    hdu: int = _opt(0, commands=OPENERS + ("publish",), unit="HDU index", kind="int", low=0, help="FITS: image HDU to read, 0 = primary")
    dataset: str | None = _opt(None, commands=OPENERS + ("publish",), unit="HDF5 path", kind="str",
                               help="HDF5: the dataset to read, e.g. /0/DATA (the format is told by the "
                                    "object's magic bytes, not its name)",
                               shown_default="the file's only 3-D or 4-D numeric dataset")
    region: str | None = _opt(None, commands=PLANNERS, unit="numpy-order slices", kind="region",
                              help="restrict the job to part of the cube, e.g. '0:100,:,200:300'",
                              shown_default="whole cube")
    pos: str | None = _opt(None, commands=REGION_TAKERS, unit="SODA POS, or a readable form with units", kind="pos",
                           help="restrict the job to a sky region: SODA's 'CIRCLE ra dec r', 'RANGE ra1 ra2 dec1 dec2', "
                                "'POLYGON ra1 dec1 ...' (degrees), or e.g. 'circle 10h00m28.8s -30d15m 5arcmin'; every "
                                "pixel whose centre lies in it is read", shown_default="no sky limit")
    band: str | None = _opt(None, commands=REGION_TAKERS, unit="SODA BAND (m), or two values with units", kind="band",
                            help="restrict the job to a spectral range: SODA's vacuum wavelengths in metres "
                                 "('0.2112 0.2114'), or '1.4170GHz 1.4185GHz', '1200km/s 1500km/s'",
                            shown_default="every channel")
    channels: str | None = _opt(None, commands=REGION_TAKERS, unit="channels, inclusive", kind="channels",
                                help="restrict the job to channels 'LO HI' (SODA's CHANNEL, 0-based, both included)",
                                shown_default="every channel")
    frame: str = _opt("icrs", commands=REGION_TAKERS + CUTOUTS, unit="icrs, fk5, fk4, galactic; fk5/fk4 with an equinox",
                      kind="frame", help="the celestial frame of pos (and of a catalogue's ra/dec), e.g. 'fk5 J2010', "
                                         "'fk4' (B1950); a frame word in pos wins")
    velocity_convention: str = _opt("radio", commands=REGION_TAKERS + CUTOUTS, kind="choice",
                                    choices=("radio", "optical", "relativistic"),
                                    help="how a velocity in band (or a catalogue's) maps to frequency")
    rest_frequency: str | None = _opt(None, commands=REGION_TAKERS + CUTOUTS, unit="frequency with unit", kind="str",
                                      help="rest frequency for velocities, e.g. 1420.405752MHz",
                                      shown_default="the header's RESTFRQ/RESTFREQ")
    # cutouts (ingest.driver.cutouts.command): every source of a catalogue cut out of the cube.
    catalogue: str | None = _opt(None, unit="path", kind="path", commands=CUTOUTS + ("plan",),
                                 help="cutouts: the source catalogue: SoFiA-2's ASCII or VOTable, or any table astropy "
                                      "reads (CSV, ECSV, VOTable, FITS) (required)")
    size: str | None = _opt(None, kind="str", commands=CUTOUTS + ("plan",), unit="radius and half width, or bbox+MARGIN",
                            help="cutouts: each cut-out's size: '5arcmin 300km/s' (a radius about ra/dec and a half "
                                 "width about the source's frequency or velocity), 'bbox+10' (SoFiA-2's box plus a "
                                 "margin in pixels), or per-source columns 'column:RADIUS,column:HALFWIDTH'",
                            shown_default="bbox+10 where the catalogue has x_min..z_max")
    columns: str | None = _opt(None, kind="str", commands=CUTOUTS + ("plan",), unit="ROLE=COLUMN[UNIT],...",
                               help="cutouts: name catalogue columns whose names are not the usual ones and give "
                                    "units the file lacks, e.g. name=ID,v_rad=VEL[km/s], or freq=[MHz] for a "
                                    "unit alone (a spectral column needs one)",
                               shown_default="recognised by name, units from the file")
    sofia_par: str | None = _opt(None, kind="path", commands=CUTOUTS + ("plan",), unit="path",
                                 help="cutouts: the SoFiA-2 parameter file of a one-region catalogue: its input.region "
                                      "places the pixel columns in the full cube, as SoFiA-X does",
                                 shown_default="pixel columns are of the full cube")
    region_offset: str | None = _opt(None, kind="str", commands=CUTOUTS + ("plan",), unit="pixels x,y,z",
                                     help="cutouts: add this to the catalogue's pixel columns (a region's origin)",
                                     shown_default="0,0,0")
    cutout_batch_bytes: int = _opt(256 << 20, unit="bytes", kind="bytes", low=1, commands=CUTOUTS + ("plan",),
                                   help="cutouts: a rank's memory budget for the band of planes it reads at once, the "
                                        "planes carried into the next band and the cut-outs filled across bands")
    report: str | None = _opt(None, unit="path", kind="path", commands=JOBS + CUTOUTS + ("publish",), help="write the JSON report here")
    output_dir: str | None = _opt(None, unit="path", kind="path", commands=JOBS + CUTOUTS,
                                  help="run: write each rank's subcube here, or one file for a named region "
                                       "(see per_rank_files); prestage: the staging directory (required)")
    per_rank_files: bool = _opt(False, kind="bool", commands=("run",),
                                help="run --output-dir of one region (--region, --pos, --band, --channels): a file "
                                     "per rank and region (rankNNNN_<box>.fits) instead of the one file of the region "
                                     "that the ranks write together")
    layout: str = _opt("frame", kind="choice", choices=LAYOUTS, commands=("prestage",),
                       help="prestage: frame = one full-size sparse file per cube, ranks write their regions "
                            "in place; frame-per-rank = one such file per rank (NFS); subcubes = one cut-out "
                            "file per region")
    sofia_template: str | None = _opt(None, unit="path", kind="path", commands=("prestage",),
                                      help="prestage: SoFiA-2 parameter file to copy into one sofia_NNN.par "
                                           "per region (and a SoFiA-X config.ini)")
    companions: tuple = _opt((), unit="NAME=SOURCE", kind="companions", commands=("prestage",),
                             help="prestage: a companion cube cut to the same regions, e.g. weights=s3://b/w.fits "
                                  "(repeat --companion for more)", shown_default="none")
    run_name: str | None = _opt(None, kind="str", commands=("prestage",),
                                help="prestage: SoFiA output names are RUN_NNN; SoFiA-X's run_name",
                                shown_default="the cube's file name without .fits")
    fresh: bool = _opt(False, kind="bool", commands=("prestage",),
                       help="prestage: ignore an existing manifest.json and stage everything again")
    compare: str = _opt("none", kind="choice", choices=("none", "staging"),
                        help="staging: also time the copy-to-filesystem baseline (needs stage_dir)")
    stage_with: str = _opt("ingest", kind="str", commands=("run", "stage"),
                           help="the tool that makes the staged copy: ingest (its own ranged download over the "
                                "ranks), s5cmd, rclone, or a command template with {source} and {dest}")
    stage_direct_io: bool = _opt(False, kind="bool",
                                 help="read the staged copy with O_DIRECT, bypassing the page cache entirely")
    stage_dir: str | None = _opt(None, unit="path", kind="path",
                                 help="directory for the staged copy; required with compare=staging")
    baseline: str | None = _opt(None, unit="path", kind="path",
                                help="earlier JSON report to compare this run against")
    native_byteorder: bool = _opt(False, kind="bool",
                                  help="return native-endian arrays (costs a byte swap) instead of FITS big-endian")
    progress: bool = _opt(True, kind="bool", commands=JOBS + CUTOUTS + ("publish",), help="show a progress bar on rank 0")
    presign_expires_s: int = _opt(3600, unit="s", kind="int", low=1, high=MAX_EXPIRES_S, commands=JOBS + CUTOUTS + ("publish",),
                                  help="lifetime of URLs ingest presigns itself (SigV4 allows 7 days)")
    retries: int | None = _opt(None, commands=OPENERS + ("publish",), unit="retries", kind="int", low=0,
                               help="retries per request after a retryable error",
                               shown_default=f"max_attempts - 1 from AWS_MAX_ATTEMPTS or the AWS profile, "
                                             f"else {RetryPolicy.retries}")
    retry_backoff_s: float = _opt(0.2, commands=OPENERS + ("publish",), unit="s", kind="float", low=0.0,
                                  help="first retry waits up to this long; the ceiling doubles each retry (full jitter)")
    retry_total_s: float = _opt(300.0, commands=OPENERS + ("publish",), unit="s", kind="float", low=0.0, low_open=True,
                                help="give up on a request after this much time spent retrying")
    connect_timeout_s: float = _opt(10.0, commands=OPENERS + ("publish",), unit="s", kind="float", low=0.0, low_open=True,
                                    help="TCP/TLS connect timeout")
    read_timeout_s: float = _opt(60.0, commands=OPENERS + ("publish",), unit="s", kind="float", low=0.0, low_open=True,
                                 help="longest wait for the next bytes of a response")
    ca_bundle: str | None = _opt(None, commands=OPENERS + ("publish",), unit="path", kind="path", help="PEM file of CAs to trust for TLS")
    verify_tls: bool = _opt(True, commands=OPENERS + ("publish",), kind="bool", help="verify TLS certificates (turn off only for test servers)")
    request_checksum_calculation: str | None = _opt(
        None, kind="choice", choices=("when_supported", "when_required"), commands=("publish",),
        help="checksums on uploads (boto3's setting): when_supported = CRC32 on every upload, sent as a header; "
             "when_required = Content-MD5, which every S3 store verifies (ingest.transports.s3client)",
        shown_default="AWS_REQUEST_CHECKSUM_CALCULATION, the profile's, else when_supported on AWS's own "
                      "endpoints and when_required on any other store")

    # publish (ingest.driver.publish): regions from every rank written back as one object.
    dest: str | None = _opt(None, unit="s3://bucket/key", kind="path", commands=("publish",) + CUTOUTS,
                            help="publish: the object to write (required); cutouts: s3://bucket/prefix/ to put "
                                 "each cut-out (and manifest.json) under, as objects")
    header_from: str | None = _opt(None, unit="path or URL", kind="path", commands=("publish",),
                                   help="publish: the FITS or HDF5 cube whose header (HDF5: dataset path and "
                                        "attributes) the object gets; NAXISn and BITPIX follow the regions",
                                   shown_default="the pre-stage's frame file or source cube")
    region_files: str | None = _opt(None, kind="str", commands=("publish",),
                                    help="publish: each region's data in its own file, a pattern with {index} (from 1, as "
                                         "sofia_NNN.par) or {index0}, e.g. run1_{index:03d}_mask.fits; boxes from the "
                                         "source's manifest.json", shown_default="the pre-stage's own files")
    part_bytes: int | None = _opt(None, unit="bytes", kind="bytes", low=MIN_PART_BYTES, high=MAX_PART_BYTES,
                                  commands=("publish",),
                                  help="publish: multipart part size (S3: 5 MiB..5 GiB, at most 10,000 parts)",
                                  shown_default="planned from the object, the ranks and latency_s x bandwidth_bytes_per_s")
    parts_in_flight: int = _opt(2, unit="parts", kind="int", low=1, high=64, commands=("publish",),
                                help="publish: parts each rank aggregates and uploads at once; a rank's buffers are "
                                     "this x part_bytes (plus one 64 MiB send buffer)")
    upload_method: str = _opt("auto", kind="choice", choices=("auto", "s3", "presigned"), commands=("publish",),
                              help="publish: s3 = every rank uploads with its own credentials (CRC32 checked); "
                                   "presigned = rank 0 hands out UploadPart URLs (Content-MD5 checked); auto: "
                                   "presigned when some rank has no credentials")
    overwrite: bool = _opt(False, kind="bool", commands=("publish",),
                           help="publish: replace an object already at dest, and discard an unfinished upload of it")
    resume: bool = _opt(False, kind="bool", commands=("publish",),
                        help="publish: continue an unfinished upload of dest (its parts verified, the rest "
                             "uploaded), and keep the upload for another --resume if this run fails")
    def __post_init__(self):
        for f in fields(self):
            object.__setattr__(self, f.name, check_value(f, getattr(self, f.name)))
        self._check_together()

    def _check_together(self) -> None:
        """Rules that involve more than one field."""
        form = source_form(self.source)
        allowed = {"posix": ("path",), "s3": ("s3",), "presigned": ("http", "s3"), "auto": ("path", "s3", "http")}
        if form not in allowed[self.method]:
            raise ConfigError(
                f"method: {self.method!r} cannot read source {self._shown_source()!r} "
                f"(posix reads local paths, s3 reads s3://bucket/key, presigned reads http(s) URLs or presigns s3://)"
            )
        if self.compare == "staging" and self.stage_dir is None:
            raise ConfigError("stage_dir: required when compare = 'staging' (a directory for the staged copy)")
        if self.ca_bundle is not None and not self.verify_tls:
            raise ConfigError("ca_bundle: given but verify_tls is false; the bundle would be ignored")
        if self.region_shape is not None and self.grid != "auto":
            raise ConfigError(f"region_shape: {self.region_shape!r} and grid {self.grid!r} both split the job; "
                              "give one of them")
        if self.region_shape is not None and self.halo:
            raise ConfigError("halo: not used with region_shape; neighbouring regions overlap by min_overlap")
        world = [name for name in ("pos", "band", "channels") if getattr(self, name) is not None]
        if world and self.region is not None:
            raise ConfigError(f"region: {self.region!r} and {', '.join(world)} both restrict the job; give pixel "
                              f"slices or a world region, not both")
        if self.band is not None and self.channels is not None:
            raise ConfigError(f"band: {self.band!r} and channels {self.channels!r} both choose channels; give one")
        if self.per_rank_files and not self.output_dir:
            raise ConfigError("per_rank_files: only applies with output_dir (run --output-dir); give both or neither")
        if self.min_overlap is not None and self.region_shape is None:
            raise ConfigError(f"min_overlap: {self.min_overlap!r} only applies with region_shape (s2p_setup's rule)")

    def __repr__(self) -> str:
        # A presigned URL is a bearer credential: keep it out of logs and tracebacks.
        shown = {**{f.name: getattr(self, f.name) for f in fields(self)}, **self._redacted()}
        return "RunConfig(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    def _redacted(self) -> dict:
        out = {"source": self._shown_source(),
               "companions": tuple((label, shown_source(source)) for label, source in self.companions)}
        if self.endpoint_url is not None:
            out["endpoint_url"] = redact_url(self.endpoint_url)
        return out

    def _shown_source(self) -> str:
        return shown_source(self.source)


    @property
    def resolved_method(self) -> str:
        """The transport to use: `method`, or for auto the one the source's form implies."""
        if self.method != "auto":
            return self.method
        return {"s3": "s3", "http": "presigned", "path": "posix"}[source_form(self.source)]

    @property
    def resolved_retries(self) -> tuple[int, str]:
        """(retries per request, where that came from): the one place `retries` gets its default.

        Set (command line, config file, API): it wins. Else, for a job that talks to a store, the
        max_attempts the user gave boto3 and the AWS CLI (AWS_MAX_ATTEMPTS, the profile's
        max_attempts) less the first attempt, for every engine and method alike; else 5. A local
        read never consults the AWS settings, so a stray AWS_PROFILE cannot fail it."""
        if self.retries is not None:
            return self.retries, "retries setting"
        if self.resolved_method != "posix" or self.dest is not None:  # publish: a local source, a store dest
            from ingest.transports.environment import resolve

            found = resolve({"endpoint_url": self.endpoint_url, "ca_bundle": self.ca_bundle,
                             "verify_tls": self.verify_tls}).retries()
            if found is not None:
                return found
        return RetryPolicy.retries, "default"

    def to_report_dict(self) -> dict:
        """All fields for the JSON report, with presigned query strings and URL passwords removed."""
        out = {**asdict(self), **self._redacted()}
        out["resolved_method"] = self.resolved_method
        out["resolved_retries"] = self.resolved_retries[0]
        from ingest.transports import resolved_engine  # late: the config must load without the I/O layer

        out["resolved_engine"] = resolved_engine(self.resolved_method, self.engine)
        return out

_FIELDS = {f.name: f for f in fields(RunConfig)}


def check_field(name: str, value):
    """Convert `value` (from Python, TOML or a command-line string) to the named field's type and
    check it (ingest.config.checks); an unknown name is refused with the closest field names."""
    f = _FIELDS.get(name)
    if f is None:
        raise ConfigError(f"{name}: not a run setting{did_you_mean(name)}")
    return check_value(f, value)


def did_you_mean(key: str, names=None) -> str:
    """' (did you mean X?)' for the closest of `names` (default: the run settings), or ''."""
    close = difflib.get_close_matches(key.replace("-", "_").lower(), list(_FIELDS if names is None else names),
                                      n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""
