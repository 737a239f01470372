#!/usr/bin/env bash
# tests/readme_test.sh - runs README.md's `$ kiln ...` examples and checks the README's shape
# (tests/readme_doctest.py does the work).
set -u
: "${KILN:=bin/kiln}"
exec python3 "$(dirname "$0")/readme_doctest.py" "$KILN" README.md docs
