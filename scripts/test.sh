#!/usr/bin/env bash
# Installs what the tests need on a fresh machine, then runs every check and test of the workspace.
# `.ci/run` calls exactly this script.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- what tests need -------------------------------------------------------------------------------
packages=()
command -v etcd >/dev/null 2>&1 || packages+=(etcd-server etcd-client)
# The kubelet's tests run real pods: containerd + runc, the CNI plugins, and `ip` for their network
# namespace; scripts/images.sh needs gcc (the pause binary) and python3.
command -v containerd >/dev/null 2>&1 || packages+=(containerd)
command -v runc >/dev/null 2>&1 || packages+=(runc)
[ -x /usr/lib/cni/bridge ] || packages+=(containernetworking-plugins)
command -v ip >/dev/null 2>&1 || packages+=(iproute2)
command -v gcc >/dev/null 2>&1 || packages+=(gcc libc6-dev)
command -v python3 >/dev/null 2>&1 || packages+=(python3)
# kube-proxy's tests apply rules with nft, iptables-restore and conntrack in their own namespaces.
command -v nft >/dev/null 2>&1 || packages+=(nftables)
command -v iptables-restore >/dev/null 2>&1 || packages+=(iptables)
command -v conntrack >/dev/null 2>&1 || packages+=(conntrack)
# `rkube bench density` draws its plot's text with DejaVu Sans (its unit test draws one).
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || packages+=(fonts-dejavu-core)
if [ ${#packages[@]} -gt 0 ]; then
  echo "test.sh: installing ${packages[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # Debian's etcd-server (and containerd) would start system services where an init system exists; tests
  # never use those (they start their own), so keep the packages' services from starting.
  echo exit 101 | $SUDO tee /usr/sbin/policy-rc.d >/dev/null && $SUDO chmod +x /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}"
  $SUDO rm -f /usr/sbin/policy-rc.d
fi
# The operator tests run a kopf operator (from PyPI) against rkube.
python3 -c 'import kopf' 2>/dev/null ||
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet 'kopf==1.45.2' ||
  echo "test.sh: cannot install kopf; tests/operators.rs will say so"
etcd --version | sed -n 1p  # sed reads it all: head could end first and SIGPIPE etcd (pipefail: 141)
containerd --version
# Images for the kubelet's tests, from Debian's packages (cached in target/images between runs).
scripts/images.sh target/images

# --- checks and tests ------------------------------------------------------------------------------
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Test binaries run side by side under cargo-nextest (`.config/nextest.toml`); nextest does not run
# doc tests, cargo test does. Without nextest, cargo test runs everything one binary at a time.
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked
  cargo test --workspace --locked --doc
else
  cargo test --workspace --locked --no-fail-fast
fi
