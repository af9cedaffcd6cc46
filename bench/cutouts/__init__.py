"""Benchmarks of cut-outs: a catalogue's cut-outs against staging and astropy (catalogue), what a
cut-out job does per file after its reads (writes), and cut-outs over a collection of tiles (tiles)."""
