"""Formats: a cube's header bytes -> a Layout (where the data lies in the object, and what it means).

`fits` is pure (header bytes in, Layout out); `reader` fetches the header blocks through a transport.
astropy (FITS headers, BEAMS tables) and h5py (HDF5 metadata) are imported by the functions that
parse, when called, never when a module loads: rank 0 parses, and the other ranks unpickle its
layout without either.
"""
