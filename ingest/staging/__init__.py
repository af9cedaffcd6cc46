"""Staging: everything that copies a whole object, in either direction.

`stage` downloads an object to a file by ranged reads (the baseline's own copier), `tools`
runs s5cmd, rclone or a user's command instead, `upload` puts a local file back by multipart
upload, `multipart` makes the calls of an upload many ranks share (checksummed parts, presigned
part URLs). The MPI side of the staging baseline is driver/baseline.py, of publish driver/publish.py.
"""
