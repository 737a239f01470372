#!/usr/bin/env bash
# tests/cli_test.sh - the kiln command line: help, emit, list, and every bad input we thought of.
set -u
. "$(dirname "$0")/cli_lib.sh"

expect "help" 0 "usage: kiln COMMAND" -- --help
expect "no command" 2 "missing command; valid: emit, list" --
expect "unknown command" 2 "unknown command 'frobnicate'; valid: emit, list" -- frobnicate
expect "emit help" 0 "usage: kiln emit FAMILY" -- emit --help
expect "list" 0 "hidden" -- list
expect "list targets" 0 "sm_90" -- list
# doc strings print whole, however long (they were cut at 255 bytes: attention's path, the norms' form)
expect "list: a long doc string whole" 0 "wgmma kernel (FlashAttention-3's structure, opt-in); one of: auto" -- list
expect "list: the norms' form doc whole" 0 "after a row-statistics kernel); one of: auto" -- list
expect "list variants" 0 "attention_bwd kernel=dkdv dtype=bf16 head_dim=128 out=f32 grad=f32 causal=true" -- list --variants attention_bwd --sm 80
expect "list variants, every SM" 0 "sm_121 norm_reduce w=bf16" -- list --variants all
expect "list variants, sm_90a by its name (what --sm takes)" 0 "sm_90a attention dtype=" -- list --variants attention
expect "list variants on sm_90a: the rows that name it (path=wgmma)" 0 "attention dtype=bf16 head_dim=128 causal=true splitkv=true path=wgmma" -- \
    list --variants attention --sm 90a
grep -qv "path=wgmma" "$tmp/out" && bad "sm_90a variants: a row that does not name sm_90a" "$(grep -v path=wgmma "$tmp/out" | head -1)" \
    || ok "sm_90a variants: only the rows that name it"
expect "list variants, full" 0 "rmsnorm x=f16 hidden=33 residual=true r=f32" -- list --variants rmsnorm --full --sm 90
expect "list variants, unknown family" 2 "unknown kernel family 'groupnorm'; valid: attention" -- list --variants groupnorm
expect "list --sm without --variants" 2 "--sm and --full go with --variants FAMILY" -- list --sm 80
expect "list variants, bad SM" 2 "unsupported SM" -- list --variants rmsnorm --sm 72
expect "emit ok" 0 ".target sm_75" -- emit layernorm x=bf16 w=f32 hidden=768 --sm 75
expect "emit sm_ prefix" 0 ".target sm_86" -- emit layernorm x=f16 --sm sm_86
expect "emit ll" 0 "define ptx_kernel" -- emit layernorm x=f16 hidden=100 --sm 80 --emit ll
expect "unknown family" 2 "unknown kernel family 'groupnorm'; valid: " -- emit groupnorm x=f32 --sm 80
expect "unknown key" 2 "unknown parameter 'dtype' for layernorm; valid: x, w, y, hidden, weight, bias" -- emit layernorm dtype=f32 --sm 80
expect "bad dtype" 2 "bad value 'fp8' for 'x'; valid: f32, f16, bf16" -- emit layernorm x=fp8 --sm 80
expect "hidden=0" 2 "bad value '0' for 'hidden'; valid: an integer 1..16384, or 'launch'" -- emit layernorm hidden=0 --sm 80
expect "hidden negative" 2 "bad value '-5' for 'hidden'" -- emit layernorm hidden=-5 --sm 80
expect "bad bool" 2 "bad value 'maybe' for 'bias'; valid: true, false" -- emit layernorm bias=maybe --sm 80
expect "malformed pair" 2 "malformed parameter 'hidden': expected key=value" -- emit layernorm hidden --sm 80
expect "two specs" 2 "one kernel per spec: 'attention' is a second family name after 'layernorm'" -- emit layernorm x=bf16 hidden=768 attention dtype=f16 --sm 80
expect "two specs, run" 2 "one kernel per spec: 'attention' is a second family name" -- run layernorm x=bf16 hidden=768 attention --sm 80 --rows 2
expect "duplicate key" 2 "given twice" -- emit layernorm x=f32 x=f16 --sm 80
expect "unsupported sm" 2 "unsupported SM '61'; valid: 70, 75, 80, 86, 89, 90" -- emit layernorm --sm 61
expect "sm garbage" 2 "unsupported SM 'eighty'" -- emit layernorm --sm eighty
expect "missing sm" 2 "missing --sm" -- emit layernorm x=f32
expect "missing family" 2 "missing kernel family" -- emit --sm 80
expect "bad emit kind" 2 "bad --emit 'sass'; valid: ptx, ll" -- emit layernorm --sm 80 --emit sass
expect "unknown option" 2 "unknown option '--fast'" -- emit layernorm --sm 80 --fast
# options are named as typed: a missing value, a value given to a flag, an unknown short option
expect "emit --sm without value" 2 "option '--sm' needs a value; see 'kiln emit --help'" -- emit layernorm --sm
expect "emit -o without value" 2 "option '-o' needs a value" -- emit layernorm --sm 80 -o
expect "emit flag given a value" 2 "option '--time' takes no value" -- emit layernorm --sm 80 --time=1
expect "emit unknown short option" 2 "unknown option '-z'" -- emit layernorm --sm 80 -z
expect "run --rows without value" 2 "option '--rows' needs a value; see 'kiln run --help'" -- run layernorm --sm 80 --rows
expect "run flag given a value" 2 "option '--twice' takes no value" -- run layernorm --sm 80 --rows 2 --twice=yes
expect "bundle --spec without value" 2 "option '--spec' needs a value; see 'kiln bundle --help'" -- bundle --spec
expect "bundle unknown option" 2 "unknown option '--frob'; see 'kiln bundle --help'" -- bundle --frob -o /nonexistent/b.kbundle
expect "list extra arg" 2 "takes no arguments" -- list layernorm
# every command's --help prints its own help (exit 0); run's and emit's name their required options
for c in emit list bundle bundle-info lint run; do expect "$c --help" 0 "usage: kiln $c" -- "$c" --help; done
expect "run --help: required" 0 "required:" -- run --help
expect "run --help: --rows" 0 "--rows R      rows (1..1048576); for attention, seq_q" -- run --help
expect "emit --help: --sm required" 0 "target SM, required" -- emit --help
# the usage texts' examples are the templates' (K.examples, as kiln list prints them): run lists every one, emit the first
first=$("$KILN" list | sed -n 's/^  example: kiln run //p' | head -1)
if [ -n "$first" ]; then
    expect "emit --help: the registry's first example" 0 "example: kiln emit ${first%% --sm *} --sm $(sed 's/.* --sm \([^ ]*\).*/\1/' <<<"$first")" -- emit --help
    while read -r ex; do expect "run --help lists: $ex" 0 "kiln run $ex" -- run --help; done < <("$KILN" list | sed -n 's/^  example: kiln run //p')
    expect "bundle --help: the --spec example" 0 "kiln bundle --spec '${first%% --sm *}'" -- bundle --help
else bad "kiln list prints examples" "none"; fi
expect "run without --rows" 2 "missing --rows R (how many rows to run, required" -- run layernorm --sm 80
# --heads H[:K] in words: zero, negative, malformed, not dividing
expect "heads 0" 2 "bad --heads '0': query heads must be at least 1; give H or H:K" -- run attention --sm 80 --rows 2 --heads 0
expect "heads 32:0" 2 "bad --heads '32:0': key/value heads must be at least 1" -- run attention --sm 80 --rows 2 --heads 32:0
expect "heads negative" 2 "bad --heads '-4': query heads must be at least 1" -- run attention --sm 80 --rows 2 --heads -4
expect "heads too many" 2 "bad --heads '70000': query heads must be at most 65535" -- run attention --sm 80 --rows 2 --heads 70000
expect "heads word" 2 "bad --heads 'x': the query head count is not a whole number" -- run attention --sm 80 --rows 2 --heads x
expect "heads 32:" 2 "bad --heads '32:': the key/value head count after ':' is not a whole number" -- run attention --sm 80 --rows 2 --heads 32:
expect "heads 32:5" 2 "bad --heads '32:5': 5 key/value heads cannot be shared evenly by 32 query heads" -- run attention --sm 80 --rows 2 --heads 32:5

# A reader that stops early (kiln list | head) ends the output quietly: exit 0, nothing on stderr.
# The reader closes its end before kiln writes (kiln takes far longer to start than the subshell).
for args in "list" "emit attention --sm 80" "run --help"; do
    # shellcheck disable=SC2086
    "$KILN" $args 2>"$tmp/err" | (exec 0<&-; sleep 0.5)
    rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 0 ] && [ ! -s "$tmp/err" ]; then ok "closed reader: $args"
    else bad "closed reader: $args" "exit $rc, stderr: $(head -c 300 "$tmp/err")"; fi
done

# An unwritable output path: error, exit 2, no file left behind, existing file untouched.
expect "unwritable output" 2 "cannot write output file '/nonexistent/dir/k.ptx'" -- emit layernorm --sm 80 -o /nonexistent/dir/k.ptx
echo "keep me" >"$tmp/keep.ptx"
"$KILN" emit layernorm x=f64 --sm 80 -o "$tmp/keep.ptx" 2>/dev/null
if [ "$(cat "$tmp/keep.ptx")" = "keep me" ] && [ -z "$(ls "$tmp" | grep -v -e keep.ptx -e out -e err)" ]; then ok "failed emit leaves no partial output"
else bad "failed emit leaves no partial output" "$(ls "$tmp")"; fi
"$KILN" emit layernorm x=bf16 hidden=4096 --sm 80 -o "$tmp/k.ptx" 2>"$tmp/err"
if [ -s "$tmp/k.ptx" ] && grep -q "^.entry\|\.entry kiln_layernorm" "$tmp/k.ptx"; then ok "emit -o writes the file"
else bad "emit -o writes the file" "$(cat "$tmp/err")"; fi

finish cli
