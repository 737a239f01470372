#!/usr/bin/env bash
# tools/setup.sh - installs (as root) or names what kiln builds and tests with: Debian packages
# (LLVM 22, Lua 5.4, xxhash, zstd/zlib, clang-22 and its libFuzzer runtime for the fuzzers, lld-22, which links bin/kiln's
# hot functions first) and, for the Python package's
# tests, pytest, numpy, ml_dtypes, setuptools and wheel from PyPI; with --torch also PyTorch for kiln.torch's tests
# (tools/torch-requirements.txt: the pinned torch and only the libraries it loads on a machine without a GPU; 4 GB,
# so a plain `make` leaves it to `make setup`, `make run` and `make test`).
#   tools/setup.sh [--torch]          install what is missing (root), else print the commands
#   tools/setup.sh --check [--torch]  only check; exit 1 naming what is missing
set -u
check=0 torch=0
for a in "$@"; do
    case $a in
        --check) check=1 ;;
        --torch) torch=1 ;;
        *) echo "tools/setup.sh: unknown option '$a'; valid: --check, --torch" >&2; exit 2 ;;
    esac
done
DEB_PKGS="llvm-22-dev liblua5.4-dev libxxhash-dev libzstd-dev zlib1g-dev clang-22 libclang-rt-22-dev lld-22 pkg-config make gcc"
PY_PKGS="pytest numpy ml_dtypes setuptools wheel"
PYTHON=${PYTHON:-python3}
TORCH_REQ="$(cd "$(dirname "$0")" && pwd)/torch-requirements.txt"
TORCH_PIN=$(sed -n 's/^torch==//p' "$TORCH_REQ")

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
[ -x /usr/lib/llvm-22/bin/ld.lld ] || missing+=(lld-22)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
py_missing=()
if command -v "$PYTHON" >/dev/null 2>&1; then
    for m in $PY_PKGS; do
        "$PYTHON" -c "import $m" >/dev/null 2>&1 || py_missing+=("$m")
    done
    # any torch 2.4+ (torch.library.custom_op) serves kiln.torch; the pin is what gets installed. Read from the
    # package's metadata: importing torch takes seconds, and make runs this check on every build.
    [ $torch = 1 ] && { "$PYTHON" -c "import importlib.metadata as m, sys; v = m.version('torch').split('.')
sys.exit(0 if (int(v[0]), int(v[1])) >= (2, 4) else 1)" >/dev/null 2>&1 || py_missing+=("torch==$TORCH_PIN"); }
fi
[ ${#missing[@]} -eq 0 ] && [ ${#py_missing[@]} -eq 0 ] && exit 0

apt_cmd="apt-get update && apt-get install -y ${missing[*]}"
py_plain=()
for m in "${py_missing[@]}"; do [[ $m == torch==* ]] || py_plain+=("$m"); done
want_torch=$(( ${#py_plain[@]} < ${#py_missing[@]} ))
plain_cmd="$PYTHON -m pip install ${py_plain[*]}"
torch_cmd="$PYTHON -m pip install --no-deps -r $TORCH_REQ"
if [ ${#py_plain[@]} -eq 0 ]; then pip_cmd=$torch_cmd
elif [ $want_torch = 1 ]; then pip_cmd="$plain_cmd && $torch_cmd"
else pip_cmd=$plain_cmd; fi
if [ $check = 1 ]; then
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
pip_q=(-q --disable-pip-version-check --retries 1 --timeout 20)
if [ ${#py_plain[@]} -gt 0 ]; then
    # The Python tests skip, saying why, without these: a failed pip is a warning, not a stop.
    echo "kiln: installing Python test packages: ${py_plain[*]}"
    "$PYTHON" -m pip install "${pip_q[@]}" "${py_plain[@]}" >/dev/null 2>&1 ||
        echo "kiln: warning: could not install ${py_plain[*]} ($plain_cmd); the Python tests will be skipped" >&2
fi
if [ $want_torch = 1 ]; then
    # --no-deps: the list is complete for a machine without a GPU (the file says why each line is there)
    echo "kiln: installing torch $TORCH_PIN for kiln.torch's tests (about a minute, 4 GB)"
    t=$SECONDS
    if "$PYTHON" -m pip install "${pip_q[@]}" --no-deps -r "$TORCH_REQ" >/dev/null 2>&1 &&
        "$PYTHON" -c "import torch" >/dev/null 2>&1; then
        echo "kiln: installed torch $TORCH_PIN in $((SECONDS - t)) s"
    else
        echo "kiln: warning: could not install torch ($torch_cmd); kiln.torch's tests will be skipped (CI fails them)" >&2
    fi
fi
exit $status
