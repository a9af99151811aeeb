#!/usr/bin/env bash
# Builds OCI image archives from Debian packages, without docker or a registry: each image's root
# filesystem is the dependency closure of a few Debian packages (fetched with apt-get download and
# unpacked with dpkg -x, maintainer scripts not run), plus busybox's applets for whatever the packages
# do not provide (sh, wget, sleep, ...), packed by scripts/images/oci.py. The perl image carries Debian's newer
# Math::BigInt (libmath-bigint-perl): perl 5.36's own fails `perl -Mbignum=bpi -wle "print bpi(2000)"`.
#
#   scripts/images.sh [OUT_DIR]      (default: target/images)
#
# Writes OUT_DIR/<name>.tar for busybox, perl, nginx, python and pause, named as a pod spec's short names
# resolve (docker.io/library/busybox:latest, ...; pause is registry.k8s.io/pause:3.10, the kubelet's
# default sandbox image). Copy them into `<data-dir>/images/` and `rkube server` imports them at start, or
# import them yourself: `ctr -n k8s.io images import OUT_DIR/busybox.tar`.
# An archive is rebuilt only when this script or its helpers changed (a stamp beside it records that).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../target/images}"
mkdir -p "$out/debs"
out="$(cd "$out" && pwd)"
stamp="$(cat "$here/images.sh" "$here/images/oci.py" "$here/images/pause.c" | sha256sum | cut -c1-16)"

need=()
command -v apt-get >/dev/null || { echo "images.sh: needs apt-get (a Debian machine)" >&2; exit 1; }
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# The packages a package needs (Depends and Pre-Depends, recursively), virtual ones left out.
closure() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances "$@" | grep '^[a-z0-9]' | sort -u
}

# Unpacks packages into a root filesystem (downloads are cached in $out/debs).
unpack() {
  local rootfs="$1"; shift
  local pkgs; pkgs="$(closure "$@")"
  (cd "$out/debs" && for p in $pkgs; do
     ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download -qq "$p" >/dev/null 2>&1 ||
       { apt-get update -qq && apt-get download -qq "$p"; }
   done)
  for p in $pkgs; do
    for deb in "$out/debs/${p}"_*.deb; do dpkg -x "$deb" "$rootfs"; done
  done
}

# The skeleton every image has: merged /usr, users, /tmp, busybox applets where no real program is.
finish_rootfs() {
  local rootfs="$1"
  mkdir -p "$rootfs/usr/bin" "$rootfs/usr/sbin" "$rootfs/usr/lib" "$rootfs/usr/lib64"
  for d in bin sbin lib lib64; do
    if [ -d "$rootfs/$d" ] && [ ! -L "$rootfs/$d" ]; then
      cp -a "$rootfs/$d/." "$rootfs/usr/$d/"
      rm -rf "${rootfs:?}/$d"
    fi
    [ -e "$rootfs/$d" ] || ln -s "usr/$d" "$rootfs/$d"
  done
  # Debian's static busybox prefers its own applets: as `sh` it would run its `nc`, `wget`, ... even
  # where the image has the real program. Images with real programs get Debian's /bin/sh, dash, as
  # the upstream Debian-based images have (dpkg -x does not run the postinst that links it).
  # The same for netcat's alternatives link (networking tests run `nc -z`, which busybox's refuses).
  if [ -e "$rootfs/usr/bin/dash" ] && [ ! -e "$rootfs/usr/bin/sh" ]; then
    ln -s dash "$rootfs/usr/bin/sh"
  fi
  if [ -e "$rootfs/usr/bin/nc.openbsd" ] && [ ! -e "$rootfs/usr/bin/nc" ]; then
    ln -s nc.openbsd "$rootfs/usr/bin/nc"
  fi
  install -m 0755 "$busybox" "$rootfs/usr/bin/busybox"
  for applet in $("$busybox" --list); do
    [ -e "$rootfs/usr/bin/$applet" ] || [ -e "$rootfs/usr/sbin/$applet" ] || ln -s busybox "$rootfs/usr/bin/$applet"
  done
  mkdir -p "$rootfs/etc" "$rootfs/root" "$rootfs/tmp" "$rootfs/run" "$rootfs/var/tmp" "$rootfs/dev" "$rootfs/proc" "$rootfs/sys"
  chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"
  cat > "$rootfs/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
PASSWD
  cat > "$rootfs/etc/group" <<'GROUP'
root:x:0:
daemon:x:1:
www-data:x:33:
nogroup:x:65534:
GROUP
  echo "hosts: files dns" > "$rootfs/etc/nsswitch.conf"
  # Documentation is not needed in an image.
  rm -rf "$rootfs/usr/share/doc" "$rootfs/usr/share/man" "$rootfs/usr/share/info" "$rootfs/usr/share/lintian"
}

# build NAME REF CONFIG_JSON PACKAGES... : one image archive.
build() {
  local name="$1" ref="$2" config="$3"; shift 3
  local tar="$out/$name.tar"
  if [ -f "$tar" ] && [ "$(cat "$tar.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "images.sh: $name is up to date ($tar)"
    return
  fi
  local rootfs; rootfs="$(mktemp -d)"
  [ $# -eq 0 ] || unpack "$rootfs" "$@"
  finish_rootfs "$rootfs"
  [ "$name" != pause ] || install -m 0755 "$work/pause" "$rootfs/pause"
  [ "$name" != nginx ] || nginx_setup "$rootfs"
  # The official python image has `python` as well as `python3` (clients' e2e pods run `python -u ...`).
  [ "$name" != python ] || ln -sf python3 "$rootfs/usr/bin/python"
  python3 "$here/images/oci.py" "$rootfs" "$tar" "$ref" "$config"
  rm -rf "$rootfs"
  echo "$stamp" > "$tar.stamp"
  echo "images.sh: built $ref -> $tar ($(du -h "$tar" | cut -f1))"
}

# What nginx's maintainer scripts would have done, and logs to the container's stdout/stderr as the
# upstream image does (so `kubectl logs` shows requests).
nginx_setup() {
  local rootfs="$1"
  mkdir -p "$rootfs/var/lib/nginx" "$rootfs/var/log/nginx" "$rootfs/etc/nginx/sites-enabled" "$rootfs/var/www/html"
  ln -sf /etc/nginx/sites-available/default "$rootfs/etc/nginx/sites-enabled/default"
  ln -sf /dev/stdout "$rootfs/var/log/nginx/access.log"
  ln -sf /dev/stderr "$rootfs/var/log/nginx/error.log"
  if [ ! -e "$rootfs/var/www/html/index.html" ] && [ -e "$rootfs/usr/share/nginx/html/index.html" ]; then
    cp "$rootfs/usr/share/nginx/html/index.html" "$rootfs/var/www/html/index.html"
  fi
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
gcc -static -Os -o "$work/pause" "$here/images/pause.c"
# busybox: Debian's static build, taken from its package (not installed on the machine).
(cd "$out/debs" && { ls busybox-static_*.deb >/dev/null 2>&1 || apt-get download -qq busybox-static 2>/dev/null ||
  { apt-get update -qq && apt-get download -qq busybox-static; }; })
mkdir -p "$work/bb" && dpkg -x "$out/debs"/busybox-static_*.deb "$work/bb"
busybox="$work/bb/bin/busybox"

path='"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"'
build pause registry.k8s.io/pause:3.10 '{"Entrypoint":["/pause"],"User":"65535:65535"}'
build busybox docker.io/library/busybox:latest "{\"Env\":[$path],\"Cmd\":[\"sh\"]}"
build perl docker.io/library/perl:latest "{\"Env\":[$path],\"Cmd\":[\"perl\",\"-de0\"]}" perl libmath-bigint-perl dash netcat-openbsd
build python docker.io/library/python:latest "{\"Env\":[$path,\"LANG=C.UTF-8\"],\"Cmd\":[\"python3\"]}" python3 dash netcat-openbsd
build nginx docker.io/library/nginx:latest "{\"Env\":[$path],\"Cmd\":[\"nginx\",\"-g\",\"daemon off;\"],\"ExposedPorts\":{\"80/tcp\":{}},\"StopSignal\":\"SIGQUIT\"}" nginx dash netcat-openbsd
