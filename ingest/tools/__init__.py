"""Tools around the engine: synthetic cubes, upload, a local S3 server, Toxiproxy link profiles and
the soak runner. The read path does not import them."""
