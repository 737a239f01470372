#!/usr/bin/env bash
# tools/setup.sh - installs (as root) or names the Debian packages kiln builds with.
#   tools/setup.sh          install what is missing (root), else print the apt-get command
#   tools/setup.sh --check  only check; exit 1 with the command when something is missing
set -u
PKGS="llvm-19-dev liblua5.4-dev libxxhash-dev libzstd-dev zlib1g-dev pkg-config make gcc"
missing=()
command -v llvm-config-19 >/dev/null 2>&1 || missing+=(llvm-19-dev)
pkg-config --exists lua5.4 2>/dev/null || missing+=(liblua5.4-dev)
[ -f /usr/include/xxhash.h ] || missing+=(libxxhash-dev)
[ -f /usr/include/zstd.h ] || missing+=(libzstd-dev)
[ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get update && apt-get install -y ${missing[*]}"
if [ "${1:-}" = "--check" ]; then
    echo "kiln: missing build dependencies: ${missing[*]}; run 'make setup' as root or: $cmd" >&2
    exit 1
fi
if [ "$(id -u)" = 0 ]; then
    echo "kiln: installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $PKGS >/dev/null
    exit $?
fi
echo "kiln: missing ${missing[*]}; as root run: $cmd" >&2
exit 1
