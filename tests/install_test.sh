#!/usr/bin/env bash
# tests/install_test.sh - `make install` into a private prefix, then an out-of-tree program built with
# `pkg-config --cflags --libs kiln-rt` (and one with kiln) against it: SONAMEs, symlinks, .pc files,
# license, and that kiln-rt.pc carries no LLVM or Lua.
set -u
. "$(dirname "$0")/cli_lib.sh"
: "${O:=build}"
SAN_ARGS=() CFLAGS_EXTRA=()
if [ "$O" != build ]; then SAN_ARGS=(SAN=1) CFLAGS_EXTRA=(-fsanitize=address,undefined); fi
P="$tmp/prefix"

if ! command -v pkg-config >/dev/null; then echo "install: 0 passed, 0 failed, 1 skipped (no pkg-config)"; exit 0; fi
if make --no-print-directory -s "${SAN_ARGS[@]}" install PREFIX="$P" >"$tmp/log" 2>&1; then ok "make install"
else bad "make install" "$(tail -n 5 "$tmp/log")"; finish install; fi

for l in libkiln_rt libkiln; do
    if [ -L "$P/lib/$l.so" ] && [ "$(readlink "$P/lib/$l.so")" = "$l.so.0" ] &&
       [ "$(readlink "$P/lib/$l.so.0")" = "$l.so.0.1.0" ] && [ -f "$P/lib/$l.so.0.1.0" ]; then ok "$l symlinks"
    else bad "$l symlinks" "$(ls -l "$P/lib" | grep "$l")"; fi
    soname=$(readelf -d "$P/lib/$l.so.0.1.0" | grep -o 'Library soname: \[[^]]*\]')
    if [ "$soname" = "Library soname: [$l.so.0]" ]; then ok "$l SONAME"; else bad "$l SONAME" "$soname"; fi
done
for f in include/kiln/runtime.h include/kiln/gen.h bin/kiln share/licenses/kiln/LICENSE \
         lib/pkgconfig/kiln.pc lib/pkgconfig/kiln-rt.pc; do
    if [ -e "$P/$f" ]; then ok "installed $f"; else bad "installed $f" "missing"; fi
done

# bin/kiln's relative relocations are packed (DT_RELR: a fresh process's start) wherever this toolchain
# takes -z pack-relative-relocs without a word (the Makefile's RELR_LDFLAGS test).
if printf 'int main(void){return 0;}' | ${CC:-cc} -x c - -Wl,-z,pack-relative-relocs -o /dev/null 2>&1 | grep -q .; then
    ok "bin/kiln: this toolchain cannot pack relocations"
elif readelf -d "$P/bin/kiln" | grep -q '(RELR)'; then ok "bin/kiln packs its relative relocations"
else bad "bin/kiln packs its relative relocations" "$(readelf -d "$P/bin/kiln" | grep -i rel)"; fi

export PKG_CONFIG_PATH="$P/lib/pkgconfig"
rtflags=$(pkg-config --cflags --libs kiln-rt 2>&1)
if grep -qiE 'llvm|lua' <<<"$rtflags"; then bad "kiln-rt.pc has no LLVM/Lua" "$rtflags"; else ok "kiln-rt.pc has no LLVM/Lua"; fi
if [ "$(pkg-config --modversion kiln-rt)" = 0.1.0 ]; then ok "kiln-rt version"; else bad "kiln-rt version" "$(pkg-config --modversion kiln-rt)"; fi

# An out-of-tree runtime program: it opens the fake driver and names the device.
cat >"$tmp/app.c" <<'EOF'
#include <stdio.h>
#include <kiln/runtime.h>
int main(void) {
    kiln_rt *rt;
    kiln_error err;
    if (kiln_rt_create(&rt, NULL, &err) != KILN_OK) { fprintf(stderr, "%s\n", err.msg); return 1; }
    printf("device sm_%d\n", kiln_rt_device(rt)->sm);
    kiln_rt_destroy(rt);
    return 0;
}
EOF
# shellcheck disable=SC2086
if cc "${CFLAGS_EXTRA[@]}" "$tmp/app.c" -o "$tmp/app" $(pkg-config --cflags --libs kiln-rt) 2>"$tmp/err"; then
    ok "build with kiln-rt.pc"
    if ldd "$tmp/app" | grep -q "libkiln_rt.so.0 => $P/lib/libkiln_rt.so.0" ||
       LD_LIBRARY_PATH="$P/lib" ldd "$tmp/app" | grep -q "libkiln_rt.so.0 => $P/lib/libkiln_rt.so.0"; then ok "links libkiln_rt.so.0"
    else bad "links libkiln_rt.so.0" "$(LD_LIBRARY_PATH="$P/lib" ldd "$tmp/app")"; fi
    if LD_LIBRARY_PATH="$P/lib" KILN_CUDA_DRIVER="$PWD/$O/tests/libfakecuda.so.1" "$tmp/app" >"$tmp/out" 2>&1 &&
       grep -q "device sm_" "$tmp/out"; then ok "runs against the installed runtime"
    else bad "runs against the installed runtime" "$(cat "$tmp/out")"; fi
else
    bad "build with kiln-rt.pc" "$(cat "$tmp/err")"
fi

# The generator through kiln.pc: one PTX module from an installed libkiln.so.
cat >"$tmp/gen.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include <kiln/gen.h>
int main(void) {
    kiln_gen *g;
    kiln_module *m;
    kiln_error err;
    if (kiln_gen_create(&g, NULL, &err) != KILN_OK ||
        kiln_generate(g, "layernorm x=bf16 w=f32 y=bf16 hidden=1024", 75, KILN_EMIT_PTX, &m, &err) != KILN_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("%s\n", strstr(kiln_module_text(m), ".target sm_75") ? "target ok" : "wrong target");
    kiln_module_free(m);
    kiln_gen_destroy(g);
    return 0;
}
EOF
# shellcheck disable=SC2086
if cc "${CFLAGS_EXTRA[@]}" "$tmp/gen.c" -o "$tmp/gen" $(pkg-config --cflags --libs kiln) 2>"$tmp/err"; then
    ok "build with kiln.pc"
    if LD_LIBRARY_PATH="$P/lib" "$tmp/gen" >"$tmp/out" 2>&1 && grep -q "target ok" "$tmp/out"; then ok "generates through the installed libkiln"
    else bad "generates through the installed libkiln" "$(cat "$tmp/out")"; fi
else
    bad "build with kiln.pc" "$(cat "$tmp/err")"
fi
finish install
