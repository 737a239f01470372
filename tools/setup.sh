#!/usr/bin/env bash
# tools/setup.sh - installs (as root) or names the Debian packages kiln builds with.
#   tools/setup.sh          install what is missing (root), else print the apt-get command
#   tools/setup.sh --check  only check; exit 1 with the command when something is missing
#   tools/setup.sh --fuzz   install the optional clang-19 (fuzz targets) alone
set -u
PKGS="llvm-19-dev liblua5.4-dev libxxhash-dev libzstd-dev zlib1g-dev pkg-config make gcc"
# Optional: clang-19 and its libFuzzer/sanitizer runtimes build the fuzz targets (tests/fuzz/);
# without them the build goes on and tests/fuzz_test.sh says skipped. Installed together with
# the required packages, or alone with `tools/setup.sh --fuzz` (root).
OPTIONAL="clang-19 libclang-rt-19-dev"
if [ "${1:-}" = "--fuzz" ]; then
    command -v clang-19 >/dev/null 2>&1 && exit 0
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $OPTIONAL >/dev/null
        exit $?
    fi
    echo "kiln: as root run: apt-get update && apt-get install -y $OPTIONAL" >&2
    exit 1
fi
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
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $PKGS >/dev/null || exit $?
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $OPTIONAL >/dev/null ||
        echo "kiln: optional $OPTIONAL not installed: the fuzz targets will be skipped" >&2
    exit 0
fi
echo "kiln: missing ${missing[*]}; as root run: $cmd" >&2
exit 1
