#!/usr/bin/env python3
"""Packs a root filesystem directory into an OCI image archive (an OCI image layout in a tar file) that
`ctr images import` and containerd's import API accept: one uncompressed layer, the image config, the
manifest, and an index naming the image.

usage: oci.py ROOTFS OUT.tar NAME CONFIG_JSON
  NAME         full reference, e.g. docker.io/library/busybox:latest
  CONFIG_JSON  the image config's `config` object (Entrypoint, Cmd, Env, WorkingDir, ExposedPorts, ...)
"""
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile


def blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(layout, "blobs", "sha256", digest)
    with open(path, "wb") as f:
        f.write(data)
    return "sha256:" + digest, len(data)


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    rootfs, out, name, config = sys.argv[1:]
    config = json.loads(config)
    with tempfile.TemporaryDirectory() as layout:
        os.makedirs(os.path.join(layout, "blobs", "sha256"))
        # Numeric owners and sorted names make the layer reproducible for the same files.
        layer = subprocess.run(
            ["tar", "--numeric-owner", "--owner=0", "--group=0", "--sort=name",
             "--mtime=@0", "-C", rootfs, "-cf", "-", "."],
            check=True, stdout=subprocess.PIPE).stdout
        layer_digest, layer_size = blob(layout, layer)
        image_config = {
            "architecture": "amd64",
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            "history": [{"created_by": "rkube scripts/images.sh (from Debian packages)"}],
        }
        config_digest, config_size = blob(layout, json.dumps(image_config).encode())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config_digest, "size": config_size},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": layer_digest, "size": layer_size}],
        }
        manifest_digest, manifest_size = blob(layout, json.dumps(manifest).encode())
        tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest, "size": manifest_size,
                "platform": {"architecture": "amd64", "os": "linux"},
                # containerd names the imported image after io.containerd.image.name.
                "annotations": {"io.containerd.image.name": name,
                                "org.opencontainers.image.ref.name": tag},
            }],
        }
        with open(os.path.join(layout, "index.json"), "w") as f:
            json.dump(index, f)
        with open(os.path.join(layout, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)
        tmp = out + ".tmp"
        subprocess.run(["tar", "--numeric-owner", "--owner=0", "--group=0", "-C", layout,
                        "-cf", tmp, "oci-layout", "index.json", "blobs"], check=True)
        os.replace(tmp, out)


if __name__ == "__main__":
    main()
