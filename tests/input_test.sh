#!/usr/bin/env bash
# tests/input_test.sh - every reader of a user's file stops: /dev/zero, a FIFO and a sparse file over the limit.
# Readers: kiln lint (also standard input), kiln bundle-info, kiln bundle --spec-list, emit --template-dir
# (issue 30 item 4).
set -u
. "$(dirname "$0")/cli_lib.sh"
dir=$tmp # cli_lib.sh removes it on exit
export KILN_CACHE=0

mkfifo "$dir/fifo"
truncate -s 257M "$dir/sparse"
over="is larger \(269484032 bytes\) than kiln's input limit of 256 MiB; set KILN_MAX_INPUT_MB to raise it"
for reader in "lint:lint input" "bundle-info:bundle" "spec-list:spec list"; do
    cmd=${reader%%:*} what=${reader#*:}
    args=("$cmd") tail=()
    [ "$cmd" = spec-list ] && args=(bundle --spec-list) tail=(--sm 80 -o "$dir/out.kbundle")
    expect_re "$cmd /dev/zero" 2 "$what '/dev/zero' is a character device, not a regular file" -- "${args[@]}" /dev/zero "${tail[@]}"
    expect_re "$cmd FIFO" 2 "$what '$dir/fifo' is a FIFO \(named pipe\), not a regular file" -- "${args[@]}" "$dir/fifo" "${tail[@]}"
    expect_re "$cmd sparse file" 2 "$what '$dir/sparse' $over" -- "${args[@]}" "$dir/sparse" "${tail[@]}"
    expect_re "$cmd missing" 2 "cannot open $what '$dir/none': No such file or directory" -- "${args[@]}" "$dir/none" "${tail[@]}"
done
[ -e "$dir/out.kbundle" ] && { fail=$((fail + 1)); echo "FAIL a refused spec list still wrote a bundle"; }

# a template directory (emit --template-dir): a template that is a FIFO, a device or too large
mkdir -p "$dir/tpl"
cp -r templates/. "$dir/tpl/"
rm "$dir/tpl/layernorm.lua" && mkfifo "$dir/tpl/layernorm.lua"
expect_re "template FIFO" 2 "template '$dir/tpl/layernorm.lua' is a FIFO" -- emit layernorm x=bf16 --sm 80 --template-dir "$dir/tpl"
rm "$dir/tpl/layernorm.lua" && ln -s /dev/zero "$dir/tpl/layernorm.lua"
expect_re "template -> /dev/zero" 2 "template '$dir/tpl/layernorm.lua' is a character device" -- emit layernorm x=bf16 --sm 80 --template-dir "$dir/tpl"
rm "$dir/tpl/layernorm.lua" && truncate -s 257M "$dir/tpl/layernorm.lua"
expect_re "template over the limit" 2 "template '$dir/tpl/layernorm.lua' $over" -- emit layernorm x=bf16 --sm 80 --template-dir "$dir/tpl"
rm "$dir/tpl/layernorm.lua" && cp templates/layernorm.lua "$dir/tpl/" && rm "$dir/tpl/lib/norm.lua" && mkfifo "$dir/tpl/lib/norm.lua"
expect_re "required template FIFO" 2 "template '$dir/tpl/lib/norm.lua' is a FIFO" -- emit layernorm x=bf16 --sm 80 --template-dir "$dir/tpl"

# standard input: streamed, and stopped at the limit
KILN_MAX_INPUT_MB=1 expect_re "lint - < endless pipe" 2 "standard input is larger than kiln's input limit of 1 MiB" -- lint - < <(cat /dev/zero)

# a spec list that is not text, or has an endless line
head -c 100 /dev/zero >"$dir/nul.txt"
expect_re "spec list with NUL bytes" 2 "spec list '$dir/nul.txt' is binary data" -- bundle --spec-list "$dir/nul.txt" --sm 80 -o "$dir/out.kbundle"
{ printf 'layernorm x=bf16 '; head -c 5000 /dev/zero | tr '\0' ' '; printf 'hidden=768\n'; } >"$dir/long.txt"
expect_re "spec list line too long" 2 "spec list '$dir/long.txt', line 1: a spec longer than" -- bundle --spec-list "$dir/long.txt" --sm 80 -o "$dir/out.kbundle"
printf '# norms\nlayernorm x=bf16 w=f32 y=bf16 hidden=768 # comment\r\n\n  rmsnorm x=f16 hidden=1024\n' >"$dir/ok.txt"
expect_re "a good spec list still works" 0 '' -- bundle --spec-list "$dir/ok.txt" --sm 80 -o "$dir/ok.kbundle"
expect_re "  and holds its 2 specs" 0 "2 entries" -- bundle-info "$dir/ok.kbundle"

finish "input"
