#!/usr/bin/env bash
# Install everything ingest needs on a fresh Debian machine: Open MPI (apt), the Python
# package with its test extras (pip), and the real servers the tests start (go install):
# the Versity S3 Gateway and Toxiproxy. Idempotent: a second run only checks.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tools_dir=${INGEST_TOOLS_DIR:-$HOME/.local/share/ingest/bin}
mkdir -p "$tools_dir"

need_apt=()
command -v mpiexec >/dev/null 2>&1 || need_apt+=(openmpi-bin libopenmpi-dev)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
{ command -v sshfs && [ -x /usr/sbin/sshd ]; } >/dev/null 2>&1 || need_apt+=(sshfs openssh-server)  # testbed/cluster: shared fs
command -v tinyproxy >/dev/null 2>&1 || need_apt+=(tinyproxy-bin)  # tests: forward proxy; -bin: the binary alone, no service left running
/usr/bin/python3 -c "import ensurepip, venv" >/dev/null 2>&1 || need_apt+=(python3 python3-venv)  # tests: a user's fresh venv
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

python3 -m pip install -q --disable-pip-version-check -e "$here[test,bench,dask]"

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
