#!/usr/bin/env bash
# tests/output_paths_test.sh - kiln never replaces what is not a regular file: devices and FIFOs are
# written in place, symlinks are followed (the link stays), regular files are replaced atomically
# with their permissions kept, '-o -' is standard output, a directory is a clear error.
# Runs on private paths in a temporary directory; /dev/null itself is written only after a private
# character device node proved the in-place path (and its kind is checked before and after).
set -u
. "$(dirname "$0")/cli_lib.sh"

SPEC=(layernorm x=f16 hidden=256)
kind() { stat -c %F "$1"; }
want_ptx() { # NAME FILE: FILE holds a PTX module
    if grep -q '^\.target sm_80' "$2" 2>/dev/null; then ok "$1"; else bad "$1" "no PTX in $2"; fi
}

# standard output
if "$KILN" emit "${SPEC[@]}" --sm 80 -o - >"$tmp/stdout.ptx" 2>"$tmp/err"; then want_ptx "-o -" "$tmp/stdout.ptx"
else bad "-o -" "$(cat "$tmp/err")"; fi

# a new regular file, then replacing it keeps its mode and leaves no temporary file behind
"$KILN" emit "${SPEC[@]}" --sm 80 -o "$tmp/new.ptx" && want_ptx "new file" "$tmp/new.ptx"
chmod 600 "$tmp/new.ptx"
"$KILN" emit "${SPEC[@]}" --sm 80 -o "$tmp/new.ptx"
if [ "$(stat -c %a "$tmp/new.ptx")" = 600 ]; then ok "mode kept"; else bad "mode kept" "$(stat -c %a "$tmp/new.ptx")"; fi
if ls -A "$tmp" | grep -q kiln-tmp; then bad "no temporary left" "$(ls -A "$tmp")"; else ok "no temporary left"; fi

# symlink to a file, relative symlink chain, dangling symlink: the links stay links
echo old >"$tmp/target.ptx"
ln -s "$tmp/target.ptx" "$tmp/link.ptx"
"$KILN" emit "${SPEC[@]}" --sm 80 -o "$tmp/link.ptx"
if [ -L "$tmp/link.ptx" ]; then ok "symlink kept"; else bad "symlink kept" "$(kind "$tmp/link.ptx")"; fi
want_ptx "symlink target written" "$tmp/target.ptx"
mkdir "$tmp/sub"
ln -s ../link.ptx "$tmp/sub/chain.ptx"
echo old >"$tmp/target.ptx"
"$KILN" emit "${SPEC[@]}" --sm 80 -o "$tmp/sub/chain.ptx"
if [ -L "$tmp/sub/chain.ptx" ] && [ -L "$tmp/link.ptx" ]; then ok "chain kept"; else bad "chain kept" "links replaced"; fi
want_ptx "chain target written" "$tmp/target.ptx"
ln -s dangling-target.ptx "$tmp/dangling.ptx"
"$KILN" emit "${SPEC[@]}" --sm 80 -o "$tmp/dangling.ptx"
if [ -L "$tmp/dangling.ptx" ]; then ok "dangling link kept"; else bad "dangling link kept" "replaced"; fi
want_ptx "dangling target created" "$tmp/dangling-target.ptx"
ln -s loop-b "$tmp/loop-a"; ln -s loop-a "$tmp/loop-b"
expect "symlink loop" 2 "Too many levels of symbolic links" -- emit "${SPEC[@]}" --sm 80 -o "$tmp/loop-a"

# FIFO: written in place while a reader drains it
mkfifo "$tmp/fifo"
timeout 30 cat "$tmp/fifo" >"$tmp/from-fifo" &
reader=$!
timeout 20 "$KILN" emit "${SPEC[@]}" --sm 80 -o "$tmp/fifo"
wait "$reader"
if [ -p "$tmp/fifo" ]; then ok "fifo kept"; else bad "fifo kept" "$(kind "$tmp/fifo")"; fi
want_ptx "fifo written" "$tmp/from-fifo"

# a bundle and the --emit-c pair through symlinks
ln -s "$tmp/bundle.real" "$tmp/bundle.link"
if "$KILN" bundle --spec "layernorm x=f16 hidden=256" --sm 80 -o "$tmp/bundle.link" >/dev/null 2>"$tmp/err" &&
   [ -L "$tmp/bundle.link" ] && [ -s "$tmp/bundle.real" ]; then ok "bundle via symlink"
else bad "bundle via symlink" "$(cat "$tmp/err")"; fi

# a directory is refused with one clear line
mkdir "$tmp/adir"
expect "directory" 2 "Is a directory" -- emit "${SPEC[@]}" --sm 80 -o "$tmp/adir"

# KILN_DUMP_DIR: a dump file that is a symlink stays one
mkdir "$tmp/dump"
KILN_DUMP_DIR="$tmp/dump" "$KILN" emit "${SPEC[@]}" --sm 80 -o "$tmp/d.ptx"
dump=$(ls "$tmp/dump" | grep '\.ptx$' | head -n 1)
if [ -n "$dump" ]; then
    rm "$tmp/dump/$dump"
    ln -s "$tmp/dump-target" "$tmp/dump/$dump"
    KILN_DUMP_DIR="$tmp/dump" "$KILN" emit "${SPEC[@]}" --sm 80 -o "$tmp/d.ptx"
    if [ -L "$tmp/dump/$dump" ]; then ok "dump symlink kept"; else bad "dump symlink kept" "replaced"; fi
    want_ptx "dump target written" "$tmp/dump-target"
else
    bad "dump" "KILN_DUMP_DIR wrote no .ptx file"
fi

# character devices: a private node first (root only), then /dev/null itself once that passed
if mknod "$tmp/null" c 1 3 2>/dev/null; then
    "$KILN" emit "${SPEC[@]}" --sm 80 -o "$tmp/null"
    if [ -c "$tmp/null" ]; then
        ok "private device kept"
        before=$(kind /dev/null)
        "$KILN" emit "${SPEC[@]}" --sm 80 -o /dev/null
        after=$(kind /dev/null)
        if [ "$before" = "character special file" ] && [ "$after" = "$before" ]; then ok "/dev/null kept"
        else bad "/dev/null kept" "before: $before, after: $after"; fi
    else
        bad "private device kept" "became: $(kind "$tmp/null")"
    fi
else
    ok "device nodes need root: private node and /dev/null cases not run"
fi

finish output_paths
