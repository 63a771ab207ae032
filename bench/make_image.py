"""bench/make_image.py DIR - write a 3-layer OCI image layout into DIR for bench/sandbox.c:
a static busybox base (gzip), a layer of 200 small files (zstd), and a top layer that
whites out part of the second (plain tar). Uses tests/integration/oci_fixtures.py."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from oci_fixtures import Layout, base_layer  # noqa: E402

lay = Layout(sys.argv[1])
files = [("data", "d", None)] + [(f"data/f{i}", "f", f"file {i}\n" * 20) for i in range(200)]
top = [("data", "d", None)] + [(f"data/.wh.f{i}", "f", "") for i in range(0, 200, 2)]
cfg = {"Env": ["PATH=/bin"], "WorkingDir": "/work"}
lay.add(lay.image([(base_layer(), "gzip"), (files, "zstd"), (top, "tar")], cfg), "1")
