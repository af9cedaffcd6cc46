"""An emulated cluster on one machine (issue 23): nodes with their own links, an object store
behind an egress cap, a shared filesystem, and mpiexec launching ranks onto the nodes.

    with Cluster(load_spec("configs/cluster.toml")) as cluster:
        url = cluster.put_file("cube.fits", "cube.fits")
        cluster.mpiexec(["run", "--source", url, "--report", "r.json"])

Needs root, iproute2 (ip, tc), /dev/fuse, sshfs and openssh-server (scripts/setup.sh);
`unavailable_reason()` says in one line what is missing. `python -m ingest.testbed.cluster`
is the command line (up, run, down).
"""
from ingest.testbed.cluster.cluster import Cluster, missing_tools, unavailable_reason
from ingest.testbed.cluster.netns import ClusterUnavailable
from ingest.testbed.cluster.spec import ClusterSpec, load_spec, spec_from_dict

__all__ = ["Cluster", "ClusterSpec", "ClusterUnavailable", "load_spec", "missing_tools", "spec_from_dict",
           "unavailable_reason"]
