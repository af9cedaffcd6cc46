"""Where a study runs: the cube and its store (given, or an embedded local server with a
synthetic cube), the link profiles in front of it, the launcher, the staging tools present.

Everything here starts or probes something real; the matrix (matrix.py) stays pure.
"""
from __future__ import annotations

import os
import shlex
import shutil
from contextlib import ExitStack
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ingest.errors import ConfigError
from ingest.study.config import StudyConfig

# The launcher inside a SLURM allocation: srun steps (the allocation's nodes, its MPI plugin).
SRUN_TEMPLATE = "srun --ntasks={ranks}"
# Outside one: Open MPI's mpiexec, oversubscribing (a laptop or CI box has fewer cores than a
# study's rank counts) and unbound (binding ranks to cores would serialise them there).
MPIEXEC_TEMPLATE = "mpiexec -n {ranks} --oversubscribe --bind-to none"


def launcher_template(setting: str, environ=os.environ) -> str:
    """study.launcher: 'auto' -> srun inside a SLURM allocation (detected), else mpiexec; or the
    user's template, which must contain {ranks}."""
    if setting != "auto":
        if "{ranks}" not in setting:
            raise ConfigError(f"study.launcher: {setting!r} has no {{ranks}} placeholder "
                              "(e.g. \"srun -n {ranks} -N {ranks}\")")
        return setting
    in_allocation = bool(environ.get("SLURM_JOB_ID")) and shutil.which("srun") is not None
    return SRUN_TEMPLATE if in_allocation else MPIEXEC_TEMPLATE


def launcher_argv(template: str, ranks: int) -> list[str]:
    return shlex.split(template.format(ranks=ranks, nodes=ranks))


def staging_tools(setting: list[str]) -> list[str]:
    """processes.stage_with: ['auto'] -> ingest plus every copy tool installed (s5cmd, rclone),
    so direct ingest is compared with the fastest staging a centre could use, not a strawman."""
    if setting != ["auto"]:
        return list(setting)
    return ["ingest"] + [tool for tool in ("s5cmd", "rclone") if shutil.which(tool)]


@dataclass
class Setting:
    """The running study's surroundings; a context manager that stops what it started."""

    source: str  # s3://bucket/key of the cube
    env: dict  # environment for every child (endpoint, keys, what mpiexec needs as root)
    links: dict = field(default_factory=dict)  # profile -> endpoint URL the children use
    _stack: ExitStack = field(default_factory=ExitStack)
    cluster: object | None = None  # the running ingest.testbed.cluster.Cluster (setting "cluster")
    local_cube: str | None = None  # a local copy of the cube, for its header (the store is out of reach)

    def launch(self, template: str, ranks: int, argv: list[str]) -> list[str]:
        """The command running argv on `ranks` ranks: the template's launcher, or the cluster's
        mpiexec (in its hub namespace, placed node by node over its hostfile)."""
        if self.cluster is not None:
            return self.cluster.mpiexec_command(argv, ranks)
        return [*launcher_argv(template, ranks), *argv]

    def stage_dirs(self, out_dir: str, stem: str) -> tuple[str, str]:
        """(the ranks' path, this process's path) of one run's staging directory: on a cluster
        the shared filesystem (mounted at one path on every node; its export here)."""
        if self.cluster is None:
            path = os.path.join(out_dir, "stage", stem)
            return path, path
        return (os.path.join(self.cluster.shared_dir, "stage", stem),
                os.path.join(self.cluster.fs.export_dir, "stage", stem))

    def env_for(self, link: str) -> dict:
        """The children's environment for one link profile: its endpoint in place of the store's."""
        if link == "loopback" or link not in self.links:
            return self.env
        return {**self.env, "AWS_ENDPOINT_URL": self.links[link], "AWS_ENDPOINT_URL_S3": self.links[link]}

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> "Setting":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _child_env(extra: dict) -> dict:
    env = {**os.environ, **extra}
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # Open MPI refuses root without both
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def _embedded(cfg: StudyConfig, out_dir: str, stack: ExitStack) -> tuple[str, dict]:
    """A local versitygw whose data lives in DIR/embedded (so a resumed study finds its cube)
    and a synthetic cube on it; the children get its endpoint and keys."""
    from ingest.testbed.localserver import LocalS3Server
    from ingest.testbed.synth import parse_fits_shape, write_cube
    from ingest.staging.upload import upload_file

    emb = cfg.embedded
    base = os.path.join(out_dir, "embedded")
    server = stack.enter_context(LocalS3Server(root=os.path.join(base, "s3")))
    cube_path = os.path.join(base, "cube.fits")
    if not os.path.exists(cube_path):
        write_cube(cube_path, parse_fits_shape(emb["shape"]), emb["bitpix"])
    object_path = os.path.join(base, "s3", emb["bucket"], emb["key"])
    if not os.path.exists(object_path) or os.path.getsize(object_path) != os.path.getsize(cube_path):
        if not os.path.isdir(os.path.join(base, "s3", emb["bucket"])):
            server.make_bucket(emb["bucket"])
        upload_file(cube_path, f"s3://{emb['bucket']}/{emb['key']}", progress=False, client=server.client())
    return f"s3://{emb['bucket']}/{emb['key']}", server.env()


def _proxies(cfg: StudyConfig, endpoint: str, stack: ExitStack) -> dict:
    """One Toxiproxy proxy per shaped profile in front of the store (kernel netem is absent here)."""
    from ingest.testbed.toxiproxy import ToxiproxyServer

    profiles = [p for p in (cfg.links or {}).get("profiles", []) if p != "loopback"]
    if not profiles:
        return {}
    parts = urlsplit(endpoint)
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigError(f"links.profiles: the store endpoint {endpoint!r} is not a plain http://host:port; "
                          "link profiles are for a store on this machine")
    toxi = stack.enter_context(ToxiproxyServer())
    links = {}
    for profile in profiles:
        listen = toxi.create_proxy(f"study-{profile}", f"{parts.hostname}:{parts.port or 80}")
        toxi.apply_profile(f"study-{profile}", profile)
        links[profile] = f"http://{listen}"
    return links


def _cluster(cfg: StudyConfig, out_dir: str, stack: ExitStack) -> Setting:
    """Build the emulated cluster of cfg.cluster and upload the synthetic cube into its store
    (kept in DIR/embedded, so a resumed study uploads the same cube into its new cluster)."""
    from ingest.testbed.cluster import Cluster
    from ingest.testbed.synth import parse_fits_shape, write_cube

    emb = cfg.embedded
    base = os.path.join(out_dir, "embedded")
    os.makedirs(base, exist_ok=True)
    cube_path = os.path.join(base, "cube.fits")
    if not os.path.exists(cube_path):
        write_cube(cube_path, parse_fits_shape(emb["shape"]), emb["bitpix"])
    cluster = stack.enter_context(Cluster(cfg.cluster))
    source = cluster.put_file(cube_path, emb["key"])
    return Setting(source, cluster.launch_env(), {}, stack, cluster=cluster, local_cube=cube_path)


def open_setting(cfg: StudyConfig, out_dir: str) -> Setting:
    """Start (or find) the store and the link proxies, or build the cluster; the caller closes
    the Setting."""
    stack = ExitStack()
    try:
        if cfg.cluster is not None:
            return _cluster(cfg, out_dir, stack)
        if cfg.embedded is not None:
            source, extra = _embedded(cfg, out_dir, stack)
        else:
            source = cfg.study["source"]
            extra = {"AWS_ENDPOINT_URL": cfg.study["endpoint_url"]} if cfg.study["endpoint_url"] else {}
        env = _child_env(extra)
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or ""
        links = _proxies(cfg, endpoint, stack) if cfg.links else {}
        return Setting(source, env, links, stack)
    except BaseException:
        stack.close()
        raise
