#!/usr/bin/env bash
# Installs kvpool's build and test dependencies from Debian 12's packages (as root).
# Quiet and quick when everything is already there.
set -euo pipefail
PKGS=(build-essential cmake pkg-config liburing-dev libxxhash-dev libisal-dev
      libgtest-dev libgmock-dev fio clang libclang-rt-14-dev
      redis-server redis-tools memcached python3-redis prometheus
      etcd-server etcd-client nlohmann-json3-dev
      python3-dev python3-pybind11 pybind11-dev python3-numpy python3-xxhash python3-torch
      libssl-dev libzmq3-dev libmsgpack-dev libdlpack-dev python3-zmq python3-msgpack python3-cbor2
      chromium fonts-dejavu-core python3-pil python3-matplotlib tmux openssl)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "kvpool: missing Debian packages: ${missing[*]}; run as root to install them" >&2
    exit 1
  fi
  echo "kvpool: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
