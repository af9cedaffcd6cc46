#!/usr/bin/env bash
# Install everything ingest needs on a fresh Debian machine: Open MPI and MPICH (apt; the MPI
# tests run under both families), the Python package with its test extras (pip), and the real
# servers the tests start: the Versity S3 Gateway and Toxiproxy (go install), Ceph's RADOS
# Gateway (apt). Idempotent: a second run only checks.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tools_dir=${INGEST_TOOLS_DIR:-$HOME/.local/share/ingest/bin}
mkdir -p "$tools_dir"

need_apt=()
# By their Debian names: once MPICH is there, a bare `mpiexec` may be MPICH's.
command -v mpiexec.openmpi >/dev/null 2>&1 || need_apt+=(openmpi-bin libopenmpi-dev)
{ command -v mpiexec.mpich && command -v mpicc.mpich; } >/dev/null 2>&1 || need_apt+=(mpich libmpich-dev)  # tests/test_mpich.py
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
{ command -v sshfs && [ -x /usr/sbin/sshd ]; } >/dev/null 2>&1 || need_apt+=(sshfs openssh-server)  # testbed/cluster: shared fs
{ [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/slurmctld ] && command -v srun && [ -x /usr/sbin/munged ] \
  && ls /usr/lib/*/libpmix.so; } >/dev/null 2>&1 \
  || need_apt+=(munge slurmctld slurmd slurm-client libpmix-dev)  # testbed/cluster --launcher slurm (and slurm-local.sh)
command -v tinyproxy >/dev/null 2>&1 || need_apt+=(tinyproxy-bin)  # tests: forward proxy; -bin: the binary alone, no service left running
/usr/bin/python3 -c "import ensurepip, venv" >/dev/null 2>&1 || need_apt+=(python3 python3-venv)  # tests: a user's fresh venv
# testbed/ceph: a one-node Ceph RGW, the store Acacia runs (Ceph 16.2 on bookworm; ~30 s, no
# recommends). The test bed starts its own daemons in a temp dir and needs no service the
# packages may enable; openssl makes the test beds' private CAs.
{ command -v ceph-mon && command -v ceph-osd && command -v radosgw && command -v radosgw-admin \
  && command -v monmaptool && command -v ceph; } >/dev/null 2>&1 || need_apt+=(ceph-mon ceph-osd radosgw ceph-common)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

# Both families register the same Debian alternatives (mpirun/mpiexec, mpicc, libmpi.so). Open
# MPI's priority wins in auto mode today; pin it anyway, only where a group points elsewhere, so
# plain `mpiexec` and mpi4py's default library stay Open MPI's whatever order they came in.
for group in mpirun mpi "mpi-$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"; do
  current=$(update-alternatives --query "$group" 2>/dev/null | sed -n 's/^Value: //p')
  wanted=$(update-alternatives --list "$group" 2>/dev/null | grep -m1 openmpi || true)
  if [ -n "$wanted" ] && [ "$current" != "$wanted" ]; then
    echo "setup: alternative $group -> $wanted (was ${current:-unset})" >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO update-alternatives --quiet --set "$group" "$wanted"
  fi
done

python3 -m pip install -q --disable-pip-version-check -e "$here[test,bench,dask]"
# An editable install compiles nothing, and where bytecode cannot be written (a read-only or shared
# filesystem, PYTHONDONTWRITEBYTECODE) every process compiles every module it imports, every time:
# compile once, as a regular install does (docs/install-cluster.md, "Start-up").
python3 -m compileall -q "$here/ingest" >/dev/null
# MPICH ranks need mpi4py's PyPI wheel (4.1+), which carries a build per MPI family (MPI.mpich.*,
# MPI.openmpi.*) and picks one at import (MPI4PY_MPIABI); a source build serves one MPI only.
if ! python3 -c "import glob, os, mpi4py, sys; sys.exit(not glob.glob(os.path.join(os.path.dirname(mpi4py.__file__), 'MPI.mpich.*')))" 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check --only-binary=mpi4py --upgrade "mpi4py>=4.1"
fi

# Go tools: versions pinned to what ../shared/INFRA.md measured.
go_tool() {  # go_tool BINARY_NAME MODULE@VERSION
  if [ ! -x "$tools_dir/$1" ]; then
    echo "setup: building $1 (one-off, ~1 min)" >&2
    GOBIN="$tools_dir" GOFLAGS=-mod=mod go install "$2"
  fi
}
go_tool versitygw github.com/versity/versitygw/cmd/versitygw@v1.8.0
go_tool server github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0
[ -x "$tools_dir/toxiproxy-server" ] || cp "$tools_dir/server" "$tools_dir/toxiproxy-server"
echo "setup: ok (tools in $tools_dir)" >&2
