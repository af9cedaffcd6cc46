"""Outputs: what a run leaves behind. JSON reports (data first, tables drawn from them), per-rank
FITS and HDF5 subcubes, prestage directories, SoFiA-2 parameter files and tiled objects."""
