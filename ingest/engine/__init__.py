"""The engine: runs a plan's requests through a transport and tunes how.

`executor` reads a plan on threads (or one native session), `multi` drives many requests in
flight from one thread, `chunked` decodes HDF5 chunks as they land, `probe` measures the link
and `autotune` feeds what it measured to the pure tuner (core.tuning). Above the transports and
formats, below the driver, the API and staging.
"""
