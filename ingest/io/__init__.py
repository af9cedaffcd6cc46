"""I/O: the only code that touches the network or the disk on the read path.

Transports behind one interface (`object_bytes`, `read_into(buffer, offset)`), the executor that
runs a plan on threads, retries, the link probe and the tuning step that feeds the probe to the
pure tuner, URL signing and the staging copy.
"""
