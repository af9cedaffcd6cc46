"""Outputs: what a run leaves behind. JSON reports (data first, tables drawn from them), per-rank
FITS and HDF5 subcubes, prestage directories, SoFiA-2 parameter files and tiled objects; and what a
publish reads and writes (publish_inputs: regions on disk; publish_image: the object's header and layout)."""
