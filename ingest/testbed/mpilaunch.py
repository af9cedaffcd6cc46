"""The environment this repository's own launches give Open MPI's ranks on one machine: the tests,
the benchmarks, the demo and the emulated cluster's nodes (docs/install-cluster.md, section 6,
says what a site sets).

- Root may run ranks: the suite runs as root in CI, and Open MPI refuses root without both.
- `pml ^cm`: at every MPI_Init, Open MPI's `cm` PML probes its PSM, PSM2 and libfabric MTLs. On a
  node with none of those fabrics it fails them all and takes `ob1`, as without the probe, so the
  probe is start-up spent for nothing (BENCHMARKS.md, "The same cells with Open MPI's fabric probe
  skipped"). A node with Omni-Path or an OFI fabric wants `cm`, so this is not set for a site's jobs.
"""
from __future__ import annotations

LOCAL_MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_pml": "^cm"}
