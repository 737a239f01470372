#!/usr/bin/env bash
# tools/setup.sh - installs (as root) or names what kiln builds and tests with: Debian packages
# (LLVM 22, Lua 5.4, xxhash, zstd/zlib, clang-22 and its libFuzzer runtime for the fuzzers) and, for the Python package's
# tests, pytest, numpy, ml_dtypes, setuptools and wheel from PyPI.
#   tools/setup.sh          install what is missing (root), else print the commands
#   tools/setup.sh --check  only check; exit 1 naming what is missing
set -u
DEB_PKGS="llvm-22-dev liblua5.4-dev libxxhash-dev libzstd-dev zlib1g-dev clang-22 libclang-rt-22-dev pkg-config make gcc"
PY_PKGS="pytest numpy ml_dtypes setuptools wheel"
PYTHON=${PYTHON:-python3}

missing=()
# llvm-config-22 comes with llvm-22 alone; the headers and static libraries are what llvm-22-dev adds
{ command -v llvm-config-22 >/dev/null 2>&1 && [ -f "$(llvm-config-22 --includedir)/llvm-c/Core.h" ] &&
  [ -f "$(llvm-config-22 --libdir)/libLLVMCore.a" ]; } || missing+=(llvm-22-dev)
pkg-config --exists lua5.4 2>/dev/null || missing+=(liblua5.4-dev)
[ -f /usr/include/xxhash.h ] || missing+=(libxxhash-dev)
[ -f /usr/include/zstd.h ] || missing+=(libzstd-dev)
[ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)
command -v clang-22 >/dev/null 2>&1 || missing+=(clang-22)
[ -n "$(ls /usr/lib/llvm-22/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a 2>/dev/null)" ] || missing+=(libclang-rt-22-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
py_missing=()
if command -v "$PYTHON" >/dev/null 2>&1; then
    for m in pytest numpy ml_dtypes setuptools wheel; do
        "$PYTHON" -c "import $m" >/dev/null 2>&1 || py_missing+=("$m")
    done
fi
[ ${#missing[@]} -eq 0 ] && [ ${#py_missing[@]} -eq 0 ] && exit 0

apt_cmd="apt-get update && apt-get install -y ${missing[*]}"
pip_cmd="$PYTHON -m pip install ${py_missing[*]}"
if [ "${1:-}" = "--check" ]; then
    [ ${#missing[@]} -gt 0 ] && echo "kiln: missing build dependencies: ${missing[*]}; run 'make setup' as root or: $apt_cmd" >&2
    [ ${#py_missing[@]} -gt 0 ] && echo "kiln: missing Python test packages: ${py_missing[*]}; run 'make setup' or: $pip_cmd" >&2
    exit 1
fi
status=0
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "kiln: installing ${missing[*]}"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $DEB_PKGS >/dev/null || status=1
    else
        echo "kiln: missing ${missing[*]}; as root run: $apt_cmd" >&2
        exit 1
    fi
fi
if [ ${#py_missing[@]} -gt 0 ]; then
    # The Python tests skip, saying why, without these: a failed pip is a warning, not a stop.
    echo "kiln: installing Python test packages: ${py_missing[*]}"
    "$PYTHON" -m pip install -q --disable-pip-version-check --retries 1 --timeout 20 "${py_missing[@]}" >/dev/null 2>&1 ||
        echo "kiln: warning: could not install ${py_missing[*]} ($pip_cmd); the Python tests will be skipped" >&2
fi
exit $status
