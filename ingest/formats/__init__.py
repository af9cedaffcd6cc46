"""Formats: a cube's header bytes -> a Layout (where the data lies in the object, and what it means).

`fits` is pure (header bytes in, Layout out); `reader` fetches the header blocks through a transport.
"""
