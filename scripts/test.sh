#!/usr/bin/env bash
# Installs what the tests need on a fresh machine, then runs every check and test of the workspace.
# `.ci/run` calls exactly this script.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- what tests need -------------------------------------------------------------------------------
packages=()
command -v etcd >/dev/null 2>&1 || packages+=(etcd-server etcd-client)
if [ ${#packages[@]} -gt 0 ]; then
  echo "test.sh: installing ${packages[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # Debian's etcd-server would start a system etcd on 2379 where an init system exists; tests never use
  # that one (they start their own on free loopback ports), so keep the package's service from starting.
  echo exit 101 | $SUDO tee /usr/sbin/policy-rc.d >/dev/null && $SUDO chmod +x /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}"
  $SUDO rm -f /usr/sbin/policy-rc.d
fi
etcd --version | head -n 1

# --- checks and tests ------------------------------------------------------------------------------
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked --no-fail-fast
