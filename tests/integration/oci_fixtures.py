"""Build OCI image layouts for tests with the standard library (tarfile, hashlib), the
same bytes a registry or `docker save` would hold: multi-layer images with whiteouts and
opaque directories, gzip / zstd / plain layers, an index with several platforms.

Layers start from a static busybox (Debian's busybox-static), so the images are
self-contained: /bin/sh and the usual tools are busybox applets, nothing of the host.
"""
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile

BUSYBOX = "/bin/busybox"
APPLETS = ["sh", "cat", "ls", "echo", "id", "pwd", "test", "stat", "env", "touch", "mkdir",
           "rm", "sleep", "true", "printf", "grep", "wc", "head", "sync"]
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = {"tar": "application/vnd.oci.image.layer.v1.tar",
         "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
         "zstd": "application/vnd.oci.image.layer.v1.tar+zstd"}


def tar_bytes(entries):
    """entries: (name, kind, data) with kind "f" (file), "d" (dir), "l" (symlink: data is
    the target), "h" (hard link), "c" (char device), "x" (file, mode in data as (mode,
    bytes)). Returns the uncompressed tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1700000000
            if kind == "d":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                t.addfile(info)
            elif kind == "l":
                info.type, info.linkname = tarfile.SYMTYPE, data
                t.addfile(info)
            elif kind == "h":
                info.type, info.linkname = tarfile.LNKTYPE, data
                t.addfile(info)
            elif kind == "c":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
                t.addfile(info)
            else:
                mode = 0o644
                if isinstance(data, tuple):
                    mode, data = data
                if isinstance(data, str):
                    data = data.encode()
                info.size, info.mode = len(data), mode
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def busybox_entries():
    with open(BUSYBOX, "rb") as f:
        bb = f.read()
    out = [("bin", "d", None), ("bin/busybox", "x", (0o755, bb))]
    out += [(f"bin/{a}", "l", "busybox") for a in APPLETS]
    return out


def compress(raw, how):
    if how == "gzip":
        return gzip.compress(raw, mtime=0)
    if how == "zstd":
        return subprocess.run(["zstd", "-q", "-c"], input=raw, stdout=subprocess.PIPE,
                              check=True).stdout
    return raw


class Layout:
    """An OCI image layout directory being written."""

    def __init__(self, path):
        self.path = path
        os.makedirs(os.path.join(path, "blobs", "sha256"), exist_ok=True)
        with open(os.path.join(path, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)
        self.index = []

    def blob(self, data):
        if isinstance(data, str):
            data = data.encode()
        h = hashlib.sha256(data).hexdigest()
        with open(os.path.join(self.path, "blobs", "sha256", h), "wb") as f:
            f.write(data)
        return "sha256:" + h, len(data)

    def image(self, layers, config=None, arch="amd64"):
        """layers: (entries, compression) bottom first. Returns the manifest descriptor."""
        descs, diff_ids = [], []
        for entries, how in layers:
            raw = tar_bytes(entries)
            diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
            dg, n = self.blob(compress(raw, how))
            descs.append({"mediaType": LAYER[how], "digest": dg, "size": n})
        cfg = {"architecture": arch, "os": "linux", "config": config or {},
               "rootfs": {"type": "layers", "diff_ids": diff_ids}}
        cdg, cn = self.blob(json.dumps(cfg))
        man = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
               "config": {"mediaType": OCI_CONFIG, "digest": cdg, "size": cn}, "layers": descs}
        mdg, mn = self.blob(json.dumps(man))
        return {"mediaType": OCI_MANIFEST, "digest": mdg, "size": mn,
                "platform": {"os": "linux", "architecture": arch}}

    def add(self, desc, ref_name=None):
        d = dict(desc)
        if ref_name:
            d["annotations"] = {"org.opencontainers.image.ref.name": ref_name}
        self.index.append(d)
        self.write_index()

    def add_platforms(self, descs, ref_name=None):
        """A nested index over several platforms, as a multi-arch registry image."""
        ix = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": descs}
        dg, n = self.blob(json.dumps(ix))
        self.add({"mediaType": OCI_INDEX, "digest": dg, "size": n}, ref_name)

    def write_index(self):
        with open(os.path.join(self.path, "index.json"), "w") as f:
            json.dump({"schemaVersion": 2, "manifests": self.index}, f)


def base_layer(extra=()):
    passwd = ("root:x:0:0:root:/root:/bin/sh\n"
              "app:x:1000:1000:app:/home/app:/bin/sh\n")
    return busybox_entries() + [
        ("etc", "d", None), ("etc/passwd", "f", passwd), ("etc/group", "f", "root:x:0:\napp:x:1000:\n"),
        ("etc/os-release", "f", "ID=rebuno-test\n"),
        ("home", "d", None), ("home/app", "d", None), ("work", "d", None),
    ] + list(extra)


def tar_dir(src, dst):
    """A tar of a directory's content (an OCI layout as one file)."""
    with tarfile.open(dst, "w") as t:
        for name in sorted(os.listdir(src)):
            t.add(os.path.join(src, name), arcname=name)
    return dst


def copy_tree(src, dst):
    shutil.copytree(src, dst, symlinks=True)
