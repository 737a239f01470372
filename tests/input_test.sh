#!/usr/bin/env bash
# tests/input_test.sh - every reader of a user's file stops: /dev/zero, a FIFO and a sparse file over the limit.
# Readers: kiln lint (also standard input), kiln bundle-info, kiln bundle --spec-list, emit --template-dir
# (issue 30 item 4).
set -u
: "${KILN:=bin/kiln}"
dir=$(mktemp -d /tmp/kiln-input-XXXXXX)
trap 'rm -rf "$dir"' EXIT
passed=0 failed=0
export KILN_CACHE=0

# expect NAME STATUS PATTERN -- ARGS...: kiln with ARGS must exit STATUS within 60 s, printing PATTERN (grep -E).
expect() {
    local name=$1 want=$2 pattern=$3
    shift 4
    local out rc
    out=$(timeout 60 "$KILN" "$@" 2>&1)
    rc=$?
    if [ "$rc" -eq "$want" ] && grep -qE -- "$pattern" <<<"$out"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL $name: exit $rc (want $want), output lacks /$pattern/:"
        sed 's/^/    /' <<<"$out" | head -5
    fi
}

mkfifo "$dir/fifo"
truncate -s 257M "$dir/sparse"
over="is larger \(269484032 bytes\) than kiln's input limit of 256 MiB; set KILN_MAX_INPUT_MB to raise it"
for reader in "lint:lint input" "bundle-info:bundle" "spec-list:spec list"; do
    cmd=${reader%%:*} what=${reader#*:}
    args=("$cmd") tail=()
    [ "$cmd" = spec-list ] && args=(bundle --spec-list) tail=(--sm 80 -o "$dir/out.kbundle")
    expect "$cmd /dev/zero" 2 "$what '/dev/zero' is a character device, not a regular file" -- "${args[@]}" /dev/zero "${tail[@]}"
    expect "$cmd FIFO" 2 "$what '$dir/fifo' is a FIFO \(named pipe\), not a regular file" -- "${args[@]}" "$dir/fifo" "${tail[@]}"
    expect "$cmd sparse file" 2 "$what '$dir/sparse' $over" -- "${args[@]}" "$dir/sparse" "${tail[@]}"
    expect "$cmd missing" 2 "cannot open $what '$dir/none': No such file or directory" -- "${args[@]}" "$dir/none" "${tail[@]}"
done
[ -e "$dir/out.kbundle" ] && { failed=$((failed + 1)); echo "FAIL a refused spec list still wrote a bundle"; }

# a template directory (emit --template-dir): a template that is a FIFO, a device or too large
mkdir -p "$dir/tpl"
cp -r templates/. "$dir/tpl/"
rm "$dir/tpl/layernorm.lua" && mkfifo "$dir/tpl/layernorm.lua"
expect "template FIFO" 2 "template '$dir/tpl/layernorm.lua' is a FIFO" -- emit layernorm x=bf16 --sm 80 --template-dir "$dir/tpl"
rm "$dir/tpl/layernorm.lua" && ln -s /dev/zero "$dir/tpl/layernorm.lua"
expect "template -> /dev/zero" 2 "template '$dir/tpl/layernorm.lua' is a character device" -- emit layernorm x=bf16 --sm 80 --template-dir "$dir/tpl"
rm "$dir/tpl/layernorm.lua" && truncate -s 257M "$dir/tpl/layernorm.lua"
expect "template over the limit" 2 "template '$dir/tpl/layernorm.lua' $over" -- emit layernorm x=bf16 --sm 80 --template-dir "$dir/tpl"
rm "$dir/tpl/layernorm.lua" && cp templates/layernorm.lua "$dir/tpl/" && rm "$dir/tpl/lib/norm.lua" && mkfifo "$dir/tpl/lib/norm.lua"
expect "required template FIFO" 2 "template '$dir/tpl/lib/norm.lua' is a FIFO" -- emit layernorm x=bf16 --sm 80 --template-dir "$dir/tpl"

# standard input: streamed, and stopped at the limit
KILN_MAX_INPUT_MB=1 expect "lint - < endless pipe" 2 "standard input is larger than kiln's input limit of 1 MiB" -- lint - < <(cat /dev/zero)

# a spec list that is not text, or has an endless line
head -c 100 /dev/zero >"$dir/nul.txt"
expect "spec list with NUL bytes" 2 "spec list '$dir/nul.txt' is binary data" -- bundle --spec-list "$dir/nul.txt" --sm 80 -o "$dir/out.kbundle"
{ printf 'layernorm x=bf16 '; head -c 5000 /dev/zero | tr '\0' ' '; printf 'hidden=768\n'; } >"$dir/long.txt"
expect "spec list line too long" 2 "spec list '$dir/long.txt', line 1: a spec longer than" -- bundle --spec-list "$dir/long.txt" --sm 80 -o "$dir/out.kbundle"
printf '# norms\nlayernorm x=bf16 w=f32 y=bf16 hidden=768 # comment\r\n\n  rmsnorm x=f16 hidden=1024\n' >"$dir/ok.txt"
expect "a good spec list still works" 0 '' -- bundle --spec-list "$dir/ok.txt" --sm 80 -o "$dir/ok.kbundle"
expect "  and holds its 2 specs" 0 "2 entries" -- bundle-info "$dir/ok.kbundle"

echo "input: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
