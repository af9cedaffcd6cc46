"""Test beds: what a run needs when no real store is at hand.

A local S3 server (versitygw), a one-node Ceph RADOS Gateway (`ceph`, Acacia's software), Toxiproxy link profiles and synthetic FITS and HDF5 cubes: the
demo, the tests, the study and the benchmarks use them. The read path never imports them.
"""
