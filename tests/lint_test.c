/* tests/lint_test.c - kiln lint: the PTX reader, every rule, bad input, and agreement with ptxas as ground truth. */
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "ptxas_util.h"
#include "gen.h"
#include "kiln/kiln.h"
#include "kiln/lint.h"
#include "kiln/runtime.h"

extern char **environ;

static int skipped;

/* ---- helpers ---- */

static kiln_lint_report *lint(const char *ptx, int device_sm) {
    kiln_lint_report *r = NULL;
    kiln_error err = {0};
    kiln_status s = kiln_lint(ptx, strlen(ptx), device_sm, &r, &err);
    CHECK(s == KILN_OK, "kiln_lint failed: %s", err.msg);
    return r;
}

/* The first finding on line (of kind, or any kind when kind < 0), or NULL. */
static const kiln_lint_finding *finding_at(const kiln_lint_report *r, int line, int kind) {
    for (size_t i = 0; i < kiln_lint_count(r); i++) {
        const kiln_lint_finding *f = kiln_lint_get(r, i);
        if (f->line == line && (kind < 0 || (int)f->kind == kind)) return f;
    }
    return NULL;
}

static void dump(const kiln_lint_report *r) {
    for (size_t i = 0; i < kiln_lint_count(r); i++) {
        const kiln_lint_finding *f = kiln_lint_get(r, i);
        printf("    finding line %d %s: %s [%s]\n", f->line, kiln_lint_kind_name(f->kind), f->message, f->instruction);
    }
}

static kiln_status lint_error(const char *ptx, size_t len, char *msg, size_t cap) {
    kiln_lint_report *r = NULL;
    kiln_error err = {0};
    kiln_status s = kiln_lint(ptx, len, 0, &r, &err);
    kiln_lint_free(r);
    snprintf(msg, cap, "%s", err.msg);
    return s;
}

#define HEAD(version, target) ".version " version "\n.target " target "\n.address_size 64\n"
/* Lines 4.. of every module below: an entry with registers. */
#define ENTRY                                                                                                          \
    ".visible .entry k(.param .u64 p)\n{\n"                                                                            \
    ".reg .b16 %rs<8>;\n.reg .b32 %r<8>;\n.reg .b64 %rd<8>;\n.reg .f32 %f<8>;\n.reg .pred %p<4>;\n"
/* ENTRY takes lines 4..10; a module's first instruction is on line 11. */

/* ---- the reader ---- */

static void test_basic(void) {
    TEST_BEGIN("bf16 conversion on sm_75 is a finding with line, text and needs");
    kiln_lint_report *r = lint(HEAD("7.0", "sm_75") ENTRY "cvt.rn.bf16.f32 \t %rs1,   %f1;\nret;\n}\n", 0);
    const kiln_lint_finding *f = finding_at(r, 11, KILN_LINT_TARGET);
    CHECK(kiln_lint_count(r) == 1, "%zu findings", kiln_lint_count(r));
    CHECK(f && f->need_sm == 80 && f->module_sm == 75 && f->module_ptx == 70, "wrong needs");
    CHECK(f && !strcmp(f->instruction, "cvt.rn.bf16.f32 %rs1, %f1;"), "text '%s'", f ? f->instruction : "");
    CHECK(f && strstr(f->message, "sm_80") && strstr(f->message, "sm_75"), "message '%s'", f ? f->message : "");
    const kiln_lint_module *m = kiln_lint_module_info(r);
    CHECK(m->sm == 75 && m->ptx == 70 && m->functions == 1 && m->instructions == 2 && m->target_line == 2,
          "module sm %d ptx %d functions %zu instructions %zu", m->sm, m->ptx, m->functions, m->instructions);
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("the same module for sm_80 is clean; kiln.meta comments before .version are fine");
    r = lint("// kiln.meta version 1\n// kiln.meta target 80 70\n" HEAD("7.0", "sm_80") ENTRY
             "cvt.rn.bf16.f32 %rs1, %f1;\nret;\n}\n",
             0);
    CHECK(kiln_lint_count(r) == 0, "%zu findings", kiln_lint_count(r));
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("an instruction that needs a newer PTX ISA than .version");
    r = lint(HEAD("6.5", "sm_75") ENTRY
             "ex2.approx.f16 %rs1, %rs2;\nldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r1}, [%rd1];\n}\n",
             0);
    f = finding_at(r, 11, KILN_LINT_ISA);
    CHECK(f && f->need_ptx == 70 && f->module_ptx == 65, "no ISA finding for ex2.approx.f16");
    CHECK(!finding_at(r, 11, KILN_LINT_TARGET) && !finding_at(r, 12, -1), "ex2.f16/ldmatrix are fine on sm_75 6.5");
    dump(r);
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN(".version too old for .target");
    r = lint(HEAD("6.5", "sm_80") ENTRY "ret;\n}\n", 0);
    f = finding_at(r, 2, KILN_LINT_VERSION);
    CHECK(f && f->need_ptx == 70 && f->module_ptx == 65, "no version finding");
    kiln_lint_free(r);
    TEST_END();
}

static void test_syntax(void) {
    TEST_BEGIN("comments hide instructions; line numbers survive them");
    kiln_lint_report *r =
        lint(HEAD("7.0", "sm_75") ENTRY "// cvt.rn.bf16.f32 %rs1, %f1;\n/* add.rn.bf16 %rs1,\n"
                                        "   cvt.rn.bf16.f32 %rs1, %f1; */ mov.b16 %rs2, %rs1; /* x */\n"
                                        "max.f16 %rs1, %rs2, %rs3; // bf16\n}\n",
             0);
    CHECK(kiln_lint_count(r) == 1 && finding_at(r, 14, KILN_LINT_TARGET), "want only max.f16 on line 14");
    dump(r);
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("strings and .pragma do not split statements");
    r = lint(
        HEAD("7.0", "sm_75") ".global .align 1 .b8 s[4] = {59, 123, 125, 0};\n.file 1 \"a;{b}.cu // x\"\n"
                             ".visible .entry k()\n{\n.reg .b16 %rs<3>;\n.reg .f32 %f<2>;\n.pragma \"nounroll; {\";\n"
                             "cvt.rn.bf16.f32 %rs1, %f1;\n}\n",
        0);
    CHECK(kiln_lint_count(r) == 1 && finding_at(r, 11, KILN_LINT_TARGET), "want one finding on line 11");
    dump(r);
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("predicates, vector operands, inline-asm blocks, labels");
    r = lint(HEAD("7.0", "sm_75") ENTRY
             "@%p1 cvt.rn.bf16.f32 %rs1, %f1;\n@!%p2 bra $L__BB0_2;\n"
             "// begin inline asm\n{\n .reg .b16 t;\n mov.b32 {%rs1, %rs2}, %r1;\n cvt.rn.bf16.f32 t, %f1;}\n"
             "// end inline asm\n$L__BB0_2: min.bf16 %rs1, %rs2, %rs3;\n$L__BB0_3:\n"
             "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0,%f1,%f2,%f3},\n  {%r0,%r1,%r2,%r3}, {%r4,%r5},"
             " {%f0,%f1,%f2,%f3};\nret;\n}\n",
             0);
    const kiln_lint_finding *f = finding_at(r, 11, KILN_LINT_TARGET);
    CHECK(f && !strcmp(f->instruction, "@%p1 cvt.rn.bf16.f32 %rs1, %f1;"), "predicated line 11: '%s'",
          f ? f->instruction : "");
    CHECK(finding_at(r, 17, KILN_LINT_TARGET), "inline asm line 17");
    CHECK(finding_at(r, 19, KILN_LINT_TARGET), "labelled line 19");
    CHECK(finding_at(r, 21, KILN_LINT_TARGET), "multi-line mma on line 21");
    CHECK(kiln_lint_count(r) == 4, "%zu findings", kiln_lint_count(r));
    dump(r);
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("several functions: .func, .entry, .extern .func declarations, call prototypes");
    r = lint(
        HEAD("7.0", "sm_75") ".extern .func (.param .b32 ret) vprintf\n(\n.param .b64 a,\n.param .b64 b\n);\n"
                             ".func (.param .b32 out) f(.param .b32 in)\n{\n.reg .b16 %h;\n.reg .f32 "
                             "%x;\ncvt.rn.bf16.f32 %h, %x;\n"
                             "ret;\n}\n.visible .entry e(.param .u64 p)\n.maxntid 128, 1, 1\n{\n.reg .b32 %r<2>;\n{\n"
                             ".param .b32 retval0;\nprototype_0 : .callprototype (.param .b32 _) _ (.param .b32 _);\n"
                             "call.uni (retval0), f, (%r1);\n}\nret;\n}\n",
        0);
    const kiln_lint_module *m = kiln_lint_module_info(r);
    CHECK(m->functions == 2, "functions %zu", m->functions);
    CHECK(kiln_lint_count(r) == 1 && finding_at(r, 13, KILN_LINT_TARGET), "want line 13");
    dump(r);
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("several .target directives: the highest governs; compute_XX and options");
    r = lint(".version 7.8\n.target sm_75\n.target compute_90, texmode_independent\n.target sm_80, debug\n"
             ".address_size 64\n.visible .entry k()\n{\n.reg .b16 %rs<4>;\nadd.rn.bf16 %rs1, %rs2, %rs3;\n}\n",
             0);
    m = kiln_lint_module_info(r);
    CHECK(m->sm == 90 && m->target_line == 3 && !strcmp(m->target, "sm_90"), "target %s line %d", m->target,
          m->target_line);
    CHECK(kiln_lint_count(r) == 0, "%zu findings", kiln_lint_count(r));
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("CRLF line ends");
    r = lint(".version 7.0\r\n.target sm_75\r\n.address_size 64\r\n.visible .entry k()\r\n{\r\n.reg .b16 %rs<2>;\r\n"
             ".reg .f32 %f<2>;\r\n\r\ncvt.rn.bf16.f32 %rs1, %f1;\r\n}\r\n",
             0);
    f = finding_at(r, 9, KILN_LINT_TARGET);
    CHECK(f && !strcmp(f->instruction, "cvt.rn.bf16.f32 %rs1, %f1;"), "CRLF line 9");
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("debug .section blocks: data lines and labels (labels need PTX ISA 7.0)");
    r = lint(HEAD("6.5", "sm_75") ENTRY "ret;\n}\n.section .debug_str\n{\n$L__info_string0:\n.b8 95,90,0\n}\n"
                                        ".section .debug_info\n{\n.b32 5 // length\n.b8 1\n}\n",
             0);
    CHECK(finding_at(r, 15, KILN_LINT_ISA) && kiln_lint_count(r) == 1, "want the section label on line 15");
    dump(r);
    kiln_lint_free(r);
    TEST_END();
}

static void test_checks(void) {
    TEST_BEGIN("illegal declarations: .reg .bf16, .shared .bf16x2, .param .bf16; .b16/.f16 are fine");
    kiln_lint_report *r =
        lint(HEAD("7.8", "sm_90") ".shared .align 4 .bf16x2 sh[4];\n"
                                  ".visible .entry k(.param .u64 a, .param .bf16 b)\n{\n.reg .bf16 %h<2>;\n"
                                  ".reg .b16 %rs<2>;\n.reg .f16 %x;\n.reg .f16x2 %y;\nret;\n}\n",
             0);
    CHECK(finding_at(r, 4, KILN_LINT_DECL) && finding_at(r, 5, KILN_LINT_DECL) && finding_at(r, 7, KILN_LINT_DECL),
          "want decl findings on lines 4, 5, 7");
    CHECK(kiln_lint_count(r) == 3, "%zu findings", kiln_lint_count(r));
    dump(r);
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("shfl/vote without .sync: error from PTX 6.4 on sm_70+, warning before, fine with .sync");
    const char *body =
        ENTRY "shfl.down.b32 %r1, %r2, 1, 31;\nvote.ballot.b32 %r1, %p1;\n"
              "shfl.sync.down.b32 %r1, %r2, 1, 31, 0xffffffff;\nvote.sync.any.pred %p1, %p2, 0xffffffff;\n}\n";
    char buf[2048];
    snprintf(buf, sizeof buf, HEAD("7.0", "sm_75") "%s", body);
    r = lint(buf, 0);
    const kiln_lint_finding *f = finding_at(r, 11, KILN_LINT_SYNC);
    CHECK(f && !f->warning && finding_at(r, 12, KILN_LINT_SYNC) && kiln_lint_count(r) == 2, "want 2 sync errors");
    kiln_lint_free(r);
    snprintf(buf, sizeof buf, HEAD("6.3", "sm_75") "%s", body);
    r = lint(buf, 0);
    f = finding_at(r, 11, KILN_LINT_SYNC);
    CHECK(f && f->warning && kiln_lint_count(r) == 2, "want 2 sync warnings");
    kiln_lint_free(r);
    snprintf(buf, sizeof buf, HEAD("6.0", "sm_61") "%s", body);
    r = lint(buf, 0);
    CHECK(!finding_at(r, 11, KILN_LINT_SYNC), "sm_61 may use shfl without .sync");
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("arch-specific instructions need the 'a' target");
    r = lint(HEAD("8.0", "sm_90") ENTRY "wgmma.fence.sync.aligned;\n}\n", 0);
    f = finding_at(r, 11, KILN_LINT_ARCH);
    CHECK(f && f->need_sm == 90 && f->need_arch && strstr(f->message, "sm_90a"), "want an arch finding");
    kiln_lint_free(r);
    r = lint(HEAD("8.0", "sm_90a") ENTRY "wgmma.fence.sync.aligned;\n}\n", 0);
    CHECK(kiln_lint_count(r) == 0, "sm_90a may use wgmma");
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("directives in a function header are reported on their own lines");
    r = lint(HEAD("7.7", "sm_90") ".visible .entry k()\n.maxntid 128, 1, 1\n.reqnctapercluster 2, 1, 1\n"
                                  ".explicitcluster\n{\nret;\n}\n",
             0);
    CHECK(finding_at(r, 2, KILN_LINT_VERSION) && finding_at(r, 6, KILN_LINT_ISA) && finding_at(r, 7, KILN_LINT_ISA),
          "want findings on lines 2, 6, 7");
    CHECK(kiln_lint_count(r) == 3, "%zu findings", kiln_lint_count(r));
    dump(r);
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("an instruction is reported at its opcode's line, after a guard on the line before");
    r = lint(HEAD("7.0", "sm_75") ENTRY "@%p1\n  cvt.rn.bf16.f32\n %rs1,\n %f1;\n}\n", 0);
    CHECK(finding_at(r, 12, KILN_LINT_TARGET) && kiln_lint_count(r) == 1, "want line 12");
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("sm and PTX ISA both short: one finding naming both");
    r = lint(HEAD("6.5", "sm_75") ENTRY "max.f16 %rs1, %rs2, %rs3;\n}\n", 0);
    f = finding_at(r, 11, KILN_LINT_TARGET);
    CHECK(f && f->need_sm == 80 && f->need_ptx == 70 && strstr(f->message, "sm_80 and PTX ISA 7.0") &&
              kiln_lint_count(r) == 1,
          "message '%s'", f ? f->message : "");
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("--sm: whether the module can run on a device, and what it would lose");
    const char *mod = HEAD("7.0", "sm_80") ENTRY "cvt.rn.bf16.f32 %rs1, %f1;\n"
                                                 "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r1}, [%rd1];\n}\n";
    r = lint(mod, 75);
    const kiln_lint_module *m = kiln_lint_module_info(r);
    CHECK(!m->runs_on_device && m->device_sm == 75, "sm_80 module must not run on sm_75");
    CHECK(finding_at(r, 2, KILN_LINT_DEVICE) && finding_at(r, 11, KILN_LINT_DEVICE) && !finding_at(r, 12, -1),
          "want device findings on lines 2 and 11 only");
    dump(r);
    kiln_lint_free(r);
    r = lint(HEAD("7.0", "sm_80") ENTRY "ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r1}, [%rd1];\n}\n", 75);
    f = finding_at(r, 2, KILN_LINT_DEVICE);
    CHECK(f && strstr(f->message, "loses nothing") && kiln_lint_count(r) == 1, "sm_80 module with only sm_75 code");
    kiln_lint_free(r);
    r = lint(mod, 90);
    CHECK(kiln_lint_module_info(r)->runs_on_device && kiln_lint_count(r) == 0, "sm_80 module runs on sm_90");
    kiln_lint_free(r);
    r = lint(HEAD("8.0", "sm_90a") ENTRY "wgmma.fence.sync.aligned;\n}\n", 100);
    CHECK(!kiln_lint_module_info(r)->runs_on_device && finding_at(r, 11, KILN_LINT_DEVICE), "sm_90a is not for sm_100");
    kiln_lint_free(r);
    r = lint(HEAD("8.8", "sm_100f") ENTRY "ret;\n}\n", 103);
    CHECK(kiln_lint_module_info(r)->runs_on_device, "sm_100f runs on sm_103");
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("device SM parsing");
    int sm = 0;
    kiln_error err = {0};
    CHECK(kiln_lint_parse_sm("sm_86", &sm, &err) == KILN_OK && sm == 86, "sm_86");
    CHECK(kiln_lint_parse_sm("8.9", &sm, &err) == KILN_OK && sm == 89, "8.9");
    CHECK(kiln_lint_parse_sm("12.0", &sm, &err) == KILN_OK && sm == 120, "12.0");
    CHECK(kiln_lint_parse_sm("75", &sm, &err) == KILN_OK && sm == 75, "75");
    const char *bad[] = {"74", "sm_", "", "abc", "sm_90a", "075", "8.", "7.5.1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(kiln_lint_parse_sm(bad[i], &sm, &err) == KILN_EINVAL && strstr(err.msg, "valid:"), "'%s' accepted",
              bad[i]);
    kiln_lint_report *none = NULL;
    CHECK(kiln_lint(HEAD("7.0", "sm_80"), 40, 74, &none, &err) == KILN_EINVAL && !none, "device 74 accepted");
    TEST_END();
}

static void test_bad_input(void) {
    char msg[1024];
    TEST_BEGIN("bad input: empty, blank, binary, no .version/.target, bad .version");
    CHECK(lint_error("", 0, msg, sizeof msg) == KILN_EINVAL && strstr(msg, "empty"), "empty: %s", msg);
    CHECK(lint_error(" \n// only a comment\n/* and */\n", 29, msg, sizeof msg) == KILN_EINVAL && strstr(msg, "blank"),
          "blank: %s", msg);
    static const char elf[] = "\x7f"
                              "ELF\x02\x01\x01\0\0\0\0\0.version 7.0";
    CHECK(lint_error(elf, sizeof elf - 1, msg, sizeof msg) == KILN_EINVAL && strstr(msg, "binary"), "binary: %s", msg);
    CHECK(lint_error(".version 7.0\0\n.target sm_80\n", 27, msg, sizeof msg) == KILN_EINVAL && strstr(msg, "binary"),
          "NUL: %s", msg);
    const char *no_target = ".version 7.0\n.address_size 64\n";
    CHECK(lint_error(no_target, strlen(no_target), msg, sizeof msg) == KILN_EINVAL && strstr(msg, ".target"),
          "no target: %s", msg);
    const char *odd_target = ".version 7.0\n.target texmode_independent\n";
    CHECK(lint_error(odd_target, strlen(odd_target), msg, sizeof msg) == KILN_EINVAL && strstr(msg, ".target"),
          "odd target: %s", msg);
    const char *no_version = ".target sm_80\n";
    CHECK(lint_error(no_version, strlen(no_version), msg, sizeof msg) == KILN_EINVAL && strstr(msg, ".version"),
          "no version: %s", msg);
    const char *bad_version = ".version seven\n.target sm_80\n";
    CHECK(lint_error(bad_version, strlen(bad_version), msg, sizeof msg) == KILN_EINVAL && strstr(msg, "line 1"),
          "bad version: %s", msg);
    const char *text = "hello, world; this is { not PTX\n";
    CHECK(lint_error(text, strlen(text), msg, sizeof msg) == KILN_EINVAL, "plain text accepted");
    TEST_END();

    TEST_BEGIN("megabyte lines: comment, initializer, operand; unterminated string and comment");
    /* comment line + 1 MB initializer + an instruction with a 1 MB operand, each on one line */
    size_t cap = 4u << 20, len = 0;
    char *t = malloc(cap);
    len += (size_t)snprintf(t, cap, HEAD("7.0", "sm_75") "// ");
    memset(t + len, 'c', 1u << 20);
    len += 1u << 20;
    len += (size_t)snprintf(t + len, cap - len, "\n.global .align 1 .b8 g[300000] = {");
    for (int i = 0; i < 300000; i++) memcpy(t + len, "1, ", 3), len += 3;
    len += (size_t)snprintf(t + len, cap - len,
                            "0};\n.visible .entry k()\n{\n.reg .b16 %%rs<2>;\n"
                            "cvt.rn.bf16.f32 %%rs1, %%f");
    memset(t + len, '9', 1u << 20);
    len += 1u << 20;
    len += (size_t)snprintf(t + len, cap - len, ";\n}\n\"unterminated string\n/* unterminated comment");
    kiln_lint_report *r = NULL;
    kiln_error err = {0};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    CHECK(kiln_lint(t, len, 0, &r, &err) == KILN_OK, "megabyte lines: %s", err.msg);
    clock_gettime(CLOCK_MONOTONIC, &b);
    const kiln_lint_finding *f = finding_at(r, 9, KILN_LINT_TARGET);
    size_t il = f ? strlen(f->instruction) : 0;
    CHECK(f && il < sizeof f->instruction && il > 3 && !strcmp(f->instruction + il - 3, "..."), "cut instruction");
    double ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
    printf("  lint of %.1f MB with megabyte lines: %.1f ms\n", len / 1048576.0, ms);
    kiln_lint_free(r);
    free(t);
    TEST_END();

    TEST_BEGIN("more than 10000 findings: the first 10000 kept, the rest counted");
    size_t many = 10050, mlen = 0;
    char *mt = malloc(many * 32 + 256);
    mlen += (size_t)sprintf(mt, "%s", HEAD("7.0", "sm_75") ".visible .entry k()\n{\n");
    for (size_t i = 0; i < many; i++) mlen += (size_t)sprintf(mt + mlen, "cvt.rn.bf16.f32 %%rs1, %%f1;\n");
    sprintf(mt + mlen, "}\n");
    r = lint(mt, 0);
    CHECK(kiln_lint_count(r) == 10000 && kiln_lint_module_info(r)->dropped == 50, "%zu kept, %zu dropped",
          kiln_lint_count(r), kiln_lint_module_info(r)->dropped);
    kiln_lint_free(r);
    free(mt);
    TEST_END();

    TEST_BEGIN("missing ';' and stray braces do not stall the reader");
    r = lint(HEAD("7.0", "sm_75") "}}}\n.visible .entry k()\n{\nret\n}\n{{\ncvt.rn.bf16.f32 %rs1, %f1\n", 0);
    CHECK(finding_at(r, 10, KILN_LINT_TARGET), "recovered finding on line 10");
    kiln_lint_free(r);
    TEST_END();
}

/* ---- issue 14: the misses found on third-party PTX, line ends and bytes, CUDA releases ---- */

/* Whether `stmt` (one line in ENTRY's function) is flagged under .version/.target, with a finding of kind. */
static bool flags(const char *version, const char *target, const char *stmt, int kind) {
    char buf[2048];
    snprintf(buf, sizeof buf, ".version %s\n.target %s\n.address_size 64\n%s%s\nret;\n}\n", version, target, ENTRY, stmt);
    kiln_lint_report *r = lint(buf, 0);
    bool hit = r && finding_at(r, 11, kind) != NULL;
    kiln_lint_free(r);
    return hit;
}

static void test_issue14(void) {
    TEST_BEGIN("the misses on Triton/nvcc output: each flagged below its need, clean at it");
    static const struct {
        const char *stmt, *low_version, *low_target, *ok_version, *ok_target;
        int kind;
    } cases[] = {
        {".pragma \"used_bytes_mask 0xf\";", "8.2", "sm_80", "8.3", "sm_80", KILN_LINT_ISA},
        {"wmma.load.a.sync.aligned.row.m8n8k4.f64 {%rd0}, [%rd1];", "7.0", "sm_75", "7.0", "sm_80", KILN_LINT_TARGET},
        {"wmma.store.d.sync.aligned.row.m16n16k16.f32 [%rd1], {%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7};", "6.2", "sm_75",
         "6.3", "sm_75", KILN_LINT_ISA},
        {"abs.f16 %rs1, %rs2;", "6.4", "sm_75", "6.5", "sm_75", KILN_LINT_ISA},
        {"abs.f16x2 %r1, %r2;", "6.4", "sm_75", "6.5", "sm_75", KILN_LINT_ISA},
        {"atom.global.cas.b16 %rs1, [%rd1], %rs2, %rs3;", "6.2", "sm_75", "6.3", "sm_75", KILN_LINT_ISA},
        {"mbarrier.arrive.shared.b64 %rd1, [%rd2], %r1;", "8.0", "sm_80", "7.8", "sm_90", KILN_LINT_TARGET},
        {"red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%r1], %r2, [%r3];", "8.0",
         "sm_90", "8.1", "sm_90", KILN_LINT_ISA},
        {"barrier.cluster.arrive.relaxed;", "7.8", "sm_90", "8.0", "sm_90", KILN_LINT_ISA},
        {"nanosleep.u32 %r1;", "6.1", "sm_75", "6.2", "sm_75", KILN_LINT_ISA},
        {"tcgen05.fence::before_thread_sync;", "8.8", "sm_120a", "8.8", "sm_103f", KILN_LINT_ARCH},
        {"min.f32 %f1, %f2, %f3, %f4;", "8.7", "sm_90", "8.8", "sm_100", KILN_LINT_TARGET},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(flags(cases[i].low_version, cases[i].low_target, cases[i].stmt, (int)cases[i].kind), "missed at %s %s: %s",
              cases[i].low_target, cases[i].low_version, cases[i].stmt);
        CHECK(!flags(cases[i].ok_version, cases[i].ok_target, cases[i].stmt, -1), "flagged at %s %s: %s",
              cases[i].ok_target, cases[i].ok_version, cases[i].stmt);
    }
    CHECK(!flags("8.0", "sm_80", "mbarrier.arrive.noComplete.shared.b64 %rd1, [%rd2], %r1;", -1),
          "mbarrier.arrive.noComplete with a count is sm_80");
    CHECK(!flags("8.0", "sm_80", "mbarrier.arrive.shared.b64 %rd1, [%rd2];", -1), "mbarrier.arrive without a count");
    CHECK(!flags("8.7", "sm_90", "min.f32 %f1, %f2, %f3;", -1), "two-input min.f32");
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", HEAD("8.8", "sm_90a") ENTRY "tcgen05.fence::before_thread_sync;\n}\n");
    kiln_lint_report *r = lint(buf, 0);
    const kiln_lint_finding *f = finding_at(r, 11, KILN_LINT_ARCH);
    CHECK(f && strstr(f->message, "one of sm_100a, sm_100f") && strstr(f->message, "sm_110f"), "message: %s",
          f ? f->message : "");
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("lone CR line ends read as ptxas does (line numbers count only LF)");
    const char *cr = ".version 7.0\r.target sm_75\r.address_size 64\r.visible .entry k()\r{\r.reg .b16 %rs<2>;\r"
                     ".reg .f32 %f<2>;\r\rcvt.rn.bf16.f32 %rs1, %f1;\r}\r";
    r = lint(cr, 0);
    CHECK(r && kiln_lint_module_info(r)->sm == 75 && kiln_lint_count(r) == 1 && finding_at(r, 1, KILN_LINT_TARGET),
          "want the bf16 finding on line 1");
    kiln_lint_free(r);
    const char *mixed = ".version 7.0\n.target sm_75\r\n.address_size 64\r.visible .entry k()\n{\r\n"
                        ".reg .b16 %rs<2>;\n.reg .f32 %f<2>;\ncvt.rn.bf16.f32 %rs1, %f1;\n}\n";
    r = lint(mixed, 0);
    CHECK(r && kiln_lint_count(r) == 1 && finding_at(r, 7, KILN_LINT_TARGET), "mixed ends: want line 7");
    dump(r);
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("a UTF-8 BOM or a non-ASCII byte: reported as ptxas does, the rest still linted");
    r = lint("\xef\xbb\xbf" HEAD("7.0", "sm_75") ENTRY "cvt.rn.bf16.f32 %rs1, %f1;\n}\n", 0);
    f = r ? kiln_lint_get(r, 0) : NULL;
    CHECK(f && f->kind == KILN_LINT_TEXT && f->line == 1 && strstr(f->message, "non-ASCII character") &&
              strstr(f->message, "byte-order mark") && finding_at(r, 11, KILN_LINT_TARGET) &&
              !strcmp(kiln_lint_kind_name(f->kind), "text"),
          "BOM: %s", f ? f->message : "");
    CHECK(kiln_lint_module_info(r)->ptx == 70, "the .version after the BOM is read");
    kiln_lint_free(r);
    r = lint(HEAD("7.0", "sm_75") "// caf\xc3\xa9\n" ENTRY "// \xe2\x80\x94\nret;\n}\n", 0);
    CHECK(r && kiln_lint_count(r) == 1 && finding_at(r, 4, KILN_LINT_TEXT), "only the first non-ASCII line (4)");
    dump(r);
    kiln_lint_free(r);
    TEST_END();

    TEST_BEGIN("kiln_lint_cuda: .version and .target against a CUDA release");
    kiln_lint_report *c = NULL;
    kiln_error err = {0};
    const char *t94 = HEAD("9.4", "sm_90a") ENTRY "ret;\n}\n";
    CHECK(kiln_lint_cuda(t94, strlen(t94), 0, 12040, &c, &err) == KILN_OK, "%s", err.msg);
    f = c ? finding_at(c, 1, KILN_LINT_CUDA) : NULL;
    CHECK(f && !f->warning && strstr(f->message, "CUDA 12.4 accepts PTX ISA up to 8.4") &&
              strstr(f->message, "CUDA 13.4 or newer") && !kiln_lint_module_info(c)->cuda_loads,
          "9.4 on 12.4: %s", f ? f->message : "");
    kiln_lint_free(c);
    CHECK(kiln_lint_cuda(t94, strlen(t94), 0, 13040, &c, &err) == KILN_OK && kiln_lint_count(c) == 0 &&
              kiln_lint_module_info(c)->cuda_loads,
          "9.4 on 13.4 is clean");
    kiln_lint_free(c);
    const char *b100 = HEAD("8.6", "sm_100") ENTRY "ret;\n}\n";
    CHECK(kiln_lint_cuda(b100, strlen(b100), 0, 12050, &c, &err) == KILN_OK, "%s", err.msg);
    f = c ? finding_at(c, 2, KILN_LINT_CUDA) : NULL;
    CHECK(f && strstr(f->message, "does not know .target sm_100") && finding_at(c, 1, KILN_LINT_CUDA),
          "sm_100 on 12.5: %s", f ? f->message : "");
    kiln_lint_free(c);
    const char *v70 = HEAD("6.0", "sm_70") ENTRY "ret;\n}\n";
    CHECK(kiln_lint_cuda(v70, strlen(v70), 0, 13000, &c, &err) == KILN_OK, "%s", err.msg);
    f = c ? finding_at(c, 2, KILN_LINT_CUDA) : NULL;
    CHECK(f && f->warning && strstr(f->message, "cannot build for sm_70") && kiln_lint_module_info(c)->cuda_loads,
          "sm_70 on 13.0: a warning: %s", f ? f->message : "");
    kiln_lint_free(c);
    CHECK(kiln_lint_cuda(v70, strlen(v70), 0, 12345, &c, &err) == KILN_EINVAL && !c && strstr(err.msg, "valid:"),
          "unknown release: %s", err.msg);
    /* a line ptxas refuses: CUDA 12.8 knows .version 8.6 and sm_90, yet neither its driver nor an sm_100 loads it */
    const char *tc90 = HEAD("8.6", "sm_90") ENTRY "tcgen05.fence::before_thread_sync;\n}\n";
    CHECK(kiln_lint_cuda(tc90, strlen(tc90), 100, 12080, &c, &err) == KILN_OK, "%s", err.msg);
    CHECK(c && finding_at(c, 11, KILN_LINT_ARCH) && !kiln_lint_module_info(c)->cuda_loads &&
              !kiln_lint_module_info(c)->runs_on_device,
          "tcgen05 on sm_90 must neither load on CUDA 12.8 nor run on sm_100");
    kiln_lint_free(c);
    const char *clean90 = HEAD("8.6", "sm_90") ENTRY "ret;\n}\n";
    CHECK(kiln_lint_cuda(clean90, strlen(clean90), 100, 12080, &c, &err) == KILN_OK && kiln_lint_count(c) == 0 &&
              kiln_lint_module_info(c)->cuda_loads && kiln_lint_module_info(c)->runs_on_device,
          "a clean sm_90 module loads on CUDA 12.8 and runs on sm_100");
    kiln_lint_free(c);
    TEST_END();
}

/* ---- the table ---- */

#define PREAMBLE                                                                                                       \
    ".address_size 64\n.visible .entry t()\n{\n.reg .b16 %rs<8>;\n.reg .b32 %r<8>;\n.reg .b64 %rd<8>;\n"               \
    ".reg .f32 %f<8>;\n.reg .f64 %fd<8>;\n.reg .pred %p<4>;\n.shared .align 16 .b8 sh[1024];\n"
enum { EXAMPLE_LINE = 13 }; /* .version, .target, then PREAMBLE's 10 lines */

static char *example_module(const char *target, int ptx, const char *example) {
    size_t n = strlen(example) + 512;
    char *s = malloc(n);
    if (example[0] == '!') /* module scope: blank comment lines keep the example on EXAMPLE_LINE */
        snprintf(s, n, ".version %d.%d\n.target %s\n.address_size 64\n//\n//\n//\n//\n//\n//\n//\n//\n//\n%s\n"
                 ".visible .entry t()\n{\nret;\n}\n",
                 ptx / 10, ptx % 10, target, example + 1);
    else
        snprintf(s, n, ".version %d.%d\n.target %s\n%s%s\nret;\n}\n", ptx / 10, ptx % 10, target, PREAMBLE, example);
    return s;
}

/* The target a row is checked at: its SM (at least sm_75, the oldest CUDA 13 knows), or for an arch row the
 * first target it lists. */
static const char *row_target(const gen_lint_rule *rl, char *buf) {
    if (rl->arch && rl->targets) {
        snprintf(buf, 16, "%.*s", (int)strcspn(rl->targets, "|"), rl->targets);
        return buf;
    }
    return gen_lint_sm_name(rl->sm > 75 ? rl->sm : 75, rl->arch, buf);
}

static void test_table_self(void) {
    size_t n;
    const gen_lint_rule *rules = gen_lint_rules(&n);
    TEST_BEGIN("every table row with an example matches it: flagged on sm_75/6.3, clean at its own needs");
    for (size_t i = 0; i < n; i++) {
        const gen_lint_rule *rl = &rules[i];
        if (!rl->example) continue;
        char target[16];
        row_target(rl, target);
        int ptx = rl->ptx > 63 ? rl->ptx : 63;
        size_t nt;
        const gen_lint_target *tt = gen_lint_targets(&nt);
        for (size_t k = 0; k < nt; k++)
            if (!strcmp(tt[k].name, target) && tt[k].ptx > ptx) ptx = tt[k].ptx;
        char *ok = example_module(target, ptx, rl->example), *low = example_module("sm_75", 63, rl->example);
        kiln_lint_report *r = lint(ok, 0);
        CHECK(r && kiln_lint_count(r) == 0, "row %zu (%s) flagged at %s %d", i, rl->feature, target, ptx);
        if (r && kiln_lint_count(r)) dump(r);
        kiln_lint_free(r);
        r = lint(low, 0);
        bool want = rl->arch || rl->sm > 75 || rl->ptx > 63;
        CHECK(r && (finding_at(r, EXAMPLE_LINE, -1) != NULL) == want, "row %zu (%s) on sm_75 6.3: %s", i, rl->feature,
              want ? "missed" : "flagged");
        const kiln_lint_finding *f =
            r ? finding_at(r, EXAMPLE_LINE, rl->arch ? KILN_LINT_ARCH : KILN_LINT_TARGET) : NULL;
        if (want && (rl->arch || rl->sm > 75))
            CHECK(f && f->need_sm == rl->sm, "row %zu (%s): finding needs sm_%d", i, rl->feature, f ? f->need_sm : 0);
        kiln_lint_free(r);
        free(ok);
        free(low);
    }
    TEST_END();
}

/* ---- robustness: mutated corpus files ---- */

static unsigned long long rng = 88172645463325252ull;
static unsigned next_rand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng >> 11);
}

static void fuzz_one(const char *text, size_t len) {
    char *m = malloc(len + 64);
    for (int round = 0; round < 60; round++) {
        memcpy(m, text, len);
        size_t n = len;
        static const char pieces[] = "{}();@!:.\"/*\n\r,%[]<>";
        for (int k = 0; k < 1 + (int)(next_rand() % 8); k++) {
            size_t at = next_rand() % (n ? n : 1);
            switch (next_rand() % 4) {
            case 0:
                m[at] = pieces[next_rand() % (sizeof pieces - 1)];
                break;
            case 1:
                n = at;
                break; /* truncate */
            case 2:
                memmove(m + at, m + at + 1, n - at - (n > at)), n -= n > at;
                break; /* delete */
            default:
                m[at] = (char)(' ' + next_rand() % 95);
                break;
            }
        }
        kiln_lint_report *r = NULL;
        kiln_error err = {0};
        kiln_status s = kiln_lint(m, n, round % 3 ? 0 : 75, &r, &err);
        CHECK(s == KILN_OK || s == KILN_EINVAL, "status %d", s);
        CHECK((s == KILN_OK) == (r != NULL), "report %p for status %d", (void *)r, s);
        for (size_t i = 0; i < kiln_lint_count(r); i++) {
            const kiln_lint_finding *f = kiln_lint_get(r, i);
            CHECK(f->line >= 1 && strlen(f->instruction) < sizeof f->instruction && f->message[0], "bad finding");
        }
        kiln_lint_free(r);
    }
    free(m);
}

/* ---- ground truth: ptxas ---- */

typedef struct job {
    char name[256]; /* what the file is, for messages */
    char *ptx;      /* its text */
    char gpu[16];   /* ptxas --gpu-name: the declared target */
    char path[300], log[300];
    int expect;     /* table rows: 1 ptxas must accept, -1 must reject on every example line, 0 either */
    int ex_first, ex_count; /* table rows: the example lines, EXAMPLE_LINE.. */
    char **ex_names;        /* table rows: what each example line is, for messages */
    bool lint_only; /* sanitizer build: linted (under ASan) but not assembled, to save time */
    pid_t pid;
    int status;
} job;

typedef struct jobs {
    job *v;
    size_t n, cap;
    char dir[64];
} jobs;

static void add_job(jobs *js, const char *name, char *ptx, const char *gpu, int expect) {
    if (js->n == js->cap) {
        js->cap = js->cap ? js->cap * 2 : 256;
        js->v = realloc(js->v, js->cap * sizeof *js->v);
    }
    job *j = &js->v[js->n];
    memset(j, 0, sizeof *j);
    snprintf(j->name, sizeof j->name, "%s", name);
    snprintf(j->gpu, sizeof j->gpu, "%s", gpu);
    snprintf(j->path, sizeof j->path, "%s/f%zu.ptx", js->dir, js->n);
    snprintf(j->log, sizeof j->log, "%s/f%zu.log", js->dir, js->n);
    j->ptx = ptx;
    j->expect = expect;
    js->n++;
}

static void run_jobs(const char *ptxas, jobs *js, int parallel) {
    size_t next = 0;
    int running = 0;
    for (size_t i = 0; i < js->n; i++) {
        FILE *f = fopen(js->v[i].path, "wb");
        if (f) fputs(js->v[i].ptx, f), fclose(f);
    }
    while (next < js->n || running > 0) {
        while (running < parallel && next < js->n) {
            job *j = &js->v[next++];
            if (j->lint_only) continue;
            char *argv[] = {(char *)ptxas, "--gpu-name", j->gpu, j->path, "-o", "/dev/null", NULL};
            posix_spawn_file_actions_t fa;
            posix_spawn_file_actions_init(&fa);
            posix_spawn_file_actions_addopen(&fa, 1, j->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            posix_spawn_file_actions_adddup2(&fa, 1, 2);
            if (posix_spawn(&j->pid, ptxas, &fa, NULL, argv, environ) != 0)
                j->pid = -1, j->status = 127;
            else
                running++;
            posix_spawn_file_actions_destroy(&fa);
        }
        int st;
        pid_t pid = wait(&st);
        if (pid < 0) break;
        for (size_t i = 0; i < next; i++)
            if (js->v[i].pid == pid) {
                js->v[i].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
                js->v[i].pid = 0;
                running--;
            }
    }
}

/* The CUDA release of the ptxas that checks lint (12040 for 12.4), from `ptxas --version`; 13000 if unclear. */
static int ptxas_cuda = 13000;

static void read_ptxas_release(const char *ptxas) {
    char cmd[4200], line[512];
    snprintf(cmd, sizeof cmd, "'%s' --version 2>/dev/null", ptxas);
    FILE *p = popen(cmd, "r");
    while (p && fgets(line, sizeof line, p)) {
        const char *r = strstr(line, "release ");
        int major, minor;
        if (r && sscanf(r + 8, "%d.%d", &major, &minor) == 2) ptxas_cuda = major * 1000 + minor * 10;
    }
    if (p) pclose(p);
}

/* ptxas messages about targets and PTX ISA versions: what lint must find. */
static bool is_arch_message(const char *msg) {
    static const char *const marks[] = {"requires .target", "requires PTX ISA", "not supported on .target",
                                        "does not support .target", "without '.sync' is not supported",
                                        "cannot be compiled for architecture", "with count argument'",
                                        "Unsupported .version", "non-ASCII character"};
    for (size_t i = 0; i < sizeof marks / sizeof *marks; i++)
        if (strstr(msg, marks[i])) return true;
    return false;
}

typedef struct tally {
    int files, accepted, arch_errors, arch_lines, findings, misses, false_alarms, other_errors, warnings;
} tally;

enum { MAX_LINE_MARKS = 4096 };

/* Compares one ptxas run with lint on the same text; returns the number of disagreements. */
static int compare(const job *j, tally *t) {
    char *log = NULL;
    size_t cap = 0, len = 0;
    FILE *f = fopen(j->log, "rb");
    if (f) {
        char chunk[4096];
        size_t got;
        while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
            if (len + got + 1 > cap) cap = (len + got + 1) * 2, log = realloc(log, cap);
            memcpy(log + len, chunk, got), len += got;
        }
        fclose(f);
    }
    if (log) log[len] = '\0';
    static unsigned char arch_line[1 << 16], lint_line[1 << 16];
    memset(arch_line, 0, sizeof arch_line), memset(lint_line, 0, sizeof lint_line);
    int bad = 0, fatal_line = 0; /* ptxas stops at a fatal error (an unsupported .version, a non-ASCII byte) */
    kiln_lint_report *r = NULL;
    kiln_error err = {0};
    if (kiln_lint_cuda(j->ptx, strlen(j->ptx), 0, ptxas_cuda, &r, &err) != KILN_OK) {
        printf("  %s: lint failed: %s\n", j->name, err.msg);
        free(log);
        return 1;
    }
    int target_line = kiln_lint_module_info(r)->target_line;
    t->files++;
    t->accepted += j->status == 0;
    for (char *p = log; p && *p;) {
        char *eol = strchr(p, '\n');
        if (eol) *eol = '\0';
        char *at = strstr(p, ", line ");
        char *kind = at ? strchr(at, ';') : NULL;
        size_t plen = strlen(j->path);
        char *nonascii = strstr(p, "Unexpected non-ASCII character encountered on line ");
        if (nonascii) { /* "ptxas fatal : Unexpected non-ASCII character encountered on line N": no file, line */
            int line = atoi(nonascii + 51);
            fatal_line = line;
            t->arch_errors++;
            if (line > 0 && line < (1 << 16) && !arch_line[line]) t->arch_lines++, arch_line[line] = 1;
        }
        bool here = at && !strncmp(p, "ptxas ", 6) && (size_t)(at - p) == 6 + plen && !strncmp(p + 6, j->path, plen);
        if (at && kind) {
            /* ptxas may place an error in its own macros ("<macro util>, line 2"): only the
             * .version/.target mismatch shows up that way; it stands for the module's .target line */
            int line = here ? atoi(at + 7) : strstr(kind, "does not support .target") ? target_line : -1;
            char *msg = strchr(kind, ':');
            msg = msg ? msg + 1 : kind;
            bool error = strstr(kind, "error") || strstr(kind, "fatal");
            if (strstr(kind, "fatal") && strstr(msg, "Unsupported .version")) fatal_line = line;
            if (error && is_arch_message(msg) && line < 0) {
                t->misses++, bad++;
                printf("  MISS %s (%s): arch error outside the file: %s\n", j->name, j->gpu, p);
            } else if (error && is_arch_message(msg) && line > 0 && line < (1 << 16)) {
                t->arch_errors++;
                if (!arch_line[line]) t->arch_lines++;
                arch_line[line] = 1;
            } else if (error) {
                t->other_errors++;
                printf("  note: %s: ptxas %s: non-arch error: %s\n", j->name, j->gpu, p);
            } else {
                t->warnings++;
            }
        }
        p = eol ? eol + 1 : NULL;
    }
    for (size_t i = 0; i < kiln_lint_count(r); i++) {
        const kiln_lint_finding *fd = kiln_lint_get(r, i);
        if (fd->warning) continue;
        t->findings++;
        if (fd->line > 0 && fd->line < (1 << 16)) lint_line[fd->line] = 1;
        if (fatal_line && fd->line != fatal_line) continue; /* ptxas stopped before it: cannot tell */
        if (fd->line <= 0 || fd->line >= (1 << 16) || !arch_line[fd->line]) {
            t->false_alarms++, bad++;
            printf("  FALSE ALARM %s (%s): line %d: %s [%s]\n", j->name, j->gpu, fd->line, fd->message,
                   fd->instruction);
        }
    }
    for (int line = 1; line < (1 << 16); line++)
        if (arch_line[line] && !lint_line[line]) {
            t->misses++, bad++;
            printf("  MISS %s (%s): ptxas reports on line %d:\n", j->name, j->gpu, line);
            for (char *p = log; p && (p = strstr(p, ", line ")); p++)
                if (atoi(p + 7) == line) printf("      %.*s\n", (int)strcspn(p, "\n"), p);
        }
    if (j->expect == 1 && j->status != 0) {
        bad++;
        printf("  TABLE %s: ptxas rejects it at %s (the table says it is enough):\n", j->name, j->gpu);
        for (char *p = log; p && (p = strstr(p, ", line ")); p++) {
            int l = atoi(p + 7) - j->ex_first;
            if (l >= 0 && l < j->ex_count) printf("      %s: %.*s\n", j->ex_names[l], (int)strcspn(p, "\n"), p);
        }
    }
    for (int l = 0; j->expect == -1 && l < j->ex_count; l++)
        if (!arch_line[j->ex_first + l]) {
            bad++;
            printf("  TABLE %s: ptxas accepts it at %s (the table says it needs more)\n", j->ex_names[l], j->gpu);
        }
    kiln_lint_free(r);
    free(log);
    return bad;
}

/* Rewrites the .target and/or .version line (keeping every line number); NULL/0 keeps it. */
static char *relabel(const char *ptx, const char *target, int version) {
    size_t len = strlen(ptx);
    char *out = malloc(len + 64), *o = out;
    for (const char *p = ptx; *p;) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        const char *c = p;
        while (c < p + n && (*c == ' ' || *c == '\t')) c++;
        if (target && !strncmp(c, ".target", 7) && (c[7] == ' ' || c[7] == '\t')) {
            o += sprintf(o, ".target %s", target), target = NULL;
        } else if (version && !strncmp(c, ".version", 8) && (c[8] == ' ' || c[8] == '\t')) {
            o += sprintf(o, ".version %d.%d", version / 10, version % 10), version = 0;
        } else {
            memcpy(o, p, n), o += n;
        }
        if (eol) *o++ = '\n';
        p = eol ? eol + 1 : p + n;
    }
    *o = '\0';
    return out;
}

static int target_ptx(const char *name) {
    size_t n;
    const gen_lint_target *t = gen_lint_targets(&n);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return t[i].ptx;
    return 0;
}

static const int lower_sms[] = {75, 80, 86, 89, 90};
static const int lower_versions[] = {63, 65, 70, 71, 78, 80};
static const int all_versions[] = {40, 41, 42, 43, 50, 60, 61, 62, 63, 64, 65, 70, 71, 72, 73, 74, 75, 76,
                                   77, 78, 80, 81, 82, 83, 84, 85, 86, 87, 88, 90};

/* One ptxas check of one table row: its example at a target and .version, to be accepted or rejected. */
typedef struct row_check {
    char target[16];
    int ptx, expect;
    const char *example;
    char name[200];
} row_check;

typedef struct row_checks {
    row_check *v;
    size_t n, cap;
} row_checks;

static void add_check(row_checks *cs, const gen_lint_rule *rl, const char *target, int ptx, int expect) {
    if (cs->n == cs->cap) {
        cs->cap = cs->cap ? cs->cap * 2 : 256;
        cs->v = realloc(cs->v, cs->cap * sizeof *cs->v);
    }
    row_check *c = &cs->v[cs->n++];
    snprintf(c->target, sizeof c->target, "%s", target);
    c->ptx = ptx, c->expect = expect, c->example = rl->example;
    snprintf(c->name, sizeof c->name, "row '%s' at %s %d.%d", rl->feature, target, ptx / 10, ptx % 10);
}

static int version_below(int v) {
    int below = 0;
    for (size_t k = 0; k < sizeof all_versions / sizeof *all_versions; k++)
        if (all_versions[k] < v) below = all_versions[k];
    return below;
}

/* The checks of one row: at its needs (ptxas must accept), one step below in SM and in PTX ISA (reject). An
 * arch row is accepted on every target it lists and rejected on the plain SM and on an arch-specific target
 * it does not list. */
static void row_checks_of(row_checks *cs, const gen_lint_rule *rl) {
    char target[16];
    row_target(rl, target);
    int need = rl->ptx > target_ptx(target) ? rl->ptx : target_ptx(target);
    add_check(cs, rl, target, need, 1);
    for (const char *a = rl->arch && rl->targets ? strchr(rl->targets, '|') : NULL; a; a = strchr(a + 1, '|')) {
        char t[16];
        snprintf(t, sizeof t, "%.*s", (int)strcspn(a + 1, "|"), a + 1);
        if (!strncmp(t, "sm_101", 6)) continue; /* CUDA 12.9's name of sm_110: CUDA 13.0's ptxas does not know it */
        add_check(cs, rl, t, rl->ptx > target_ptx(t) ? rl->ptx : target_ptx(t), 1);
    }
    int sm = rl->sm > 75 ? rl->sm : 75;
    if (rl->arch) {
        static const char *const others[] = {"sm_90a", "sm_100a", "sm_120a"};
        char plain[16];
        gen_lint_sm_name(sm, false, plain);
        add_check(cs, rl, plain, need > target_ptx(plain) ? need : target_ptx(plain), -1);
        for (size_t k = 0; k < sizeof others / sizeof *others; k++) {
            const char *o = others[k], *list = rl->targets ? rl->targets : target;
            size_t ol = strlen(o);
            bool listed = false;
            for (const char *a = list; (a = strstr(a, o)); a += ol) listed |= a[ol] == '|' || a[ol] == '\0';
            if (!listed && atoi(o + 3) >= rl->sm)
                add_check(cs, rl, o, rl->ptx > target_ptx(o) ? rl->ptx : target_ptx(o), -1);
        }
    } else if (sm > 75) { /* the SM below */
        char below[16];
        int bsm = 75;
        for (size_t k = 0; k < sizeof lower_sms / sizeof *lower_sms; k++)
            if (lower_sms[k] < sm) bsm = lower_sms[k];
        gen_lint_sm_name(bsm, false, below);
        add_check(cs, rl, below, need > target_ptx(below) ? need : target_ptx(below), -1);
    }
    if (rl->sm2) { /* the newer SM that got it in an older PTX ISA: enough there, one version below not */
        char t2[16];
        gen_lint_sm_name(rl->sm2, false, t2);
        int v2 = rl->ptx2 > target_ptx(t2) ? rl->ptx2 : target_ptx(t2), below = version_below(v2);
        add_check(cs, rl, t2, v2, 1);
        if (below >= target_ptx(t2) && below >= 60) add_check(cs, rl, t2, below, -1);
    }
    /* the PTX ISA version below, also below the target's own minimum: ptxas names both problems */
    if (rl->ptx > all_versions[0]) add_check(cs, rl, target, version_below(rl->ptx), -1);
}

/* Every row's checks, as few ptxas runs: the function-body examples that share a target, .version and
 * expectation go into one file, one example a line; module-scope examples get a file each. */
static void table_jobs(jobs *js) {
    size_t n;
    const gen_lint_rule *rules = gen_lint_rules(&n);
    row_checks cs = {0};
    for (size_t i = 0; i < n; i++)
        if (rules[i].example) row_checks_of(&cs, &rules[i]);
    bool *done = calloc(cs.n, sizeof *done);
    size_t first_job = js->n, with_example = 0;
    for (size_t i = 0; i < n; i++) with_example += rules[i].example != NULL;
    for (size_t i = 0; i < cs.n; i++) {
        if (done[i]) continue;
        row_check *c = &cs.v[i];
        size_t size = 1024, count = 0;
        for (size_t k = i; k < cs.n; k++) size += strlen(cs.v[k].example) + 1;
        char *text = malloc(size), **names = calloc(cs.n - i, sizeof *names);
        int len = snprintf(text, size, ".version %d.%d\n.target %s\n%s", c->ptx / 10, c->ptx % 10, c->target, PREAMBLE);
        for (size_t k = i; k < cs.n; k++) {
            row_check *o = &cs.v[k];
            bool module_scope = c->example[0] == '!';
            if (done[k] || (k > i && (module_scope || o->example[0] == '!' || o->ptx != c->ptx ||
                                      o->expect != c->expect || strcmp(o->target, c->target))))
                continue;
            done[k] = true;
            names[count++] = strdup(o->name);
            if (module_scope) {
                free(text);
                text = example_module(c->target, c->ptx, c->example);
                break;
            }
            len += snprintf(text + len, size - (size_t)len, "%s\n", o->example);
        }
        if (c->example[0] != '!') snprintf(text + len, size - (size_t)len, "ret;\n}\n");
        char name[256];
        snprintf(name, sizeof name, "%s%s", names[0], count > 1 ? " and others" : "");
        add_job(js, name, text, c->target, c->expect);
        job *j = &js->v[js->n - 1];
        j->ex_first = EXAMPLE_LINE, j->ex_count = (int)count, j->ex_names = names;
    }
    printf("  table: %zu rows (%zu with an example), %zu ptxas checks (accept at the need, reject below) in %zu files\n", n,
           with_example, cs.n, js->n - first_job);
    free(done);
    free(cs.v);
}

/* One file: as written, relabeled to every lower SM, and with every lower .version. */
static void variant_jobs(jobs *js, const char *label, const char *ptx) {
    kiln_lint_report *r = NULL;
    kiln_error err = {0};
    if (kiln_lint(ptx, strlen(ptx), 0, &r, &err) != KILN_OK) {
        CHECK(0, "%s: %s", label, err.msg);
        return;
    }
    const kiln_lint_module *m = kiln_lint_module_info(r);
    char name[160], target[32];
    snprintf(target, sizeof target, "%s", m->target);
    int sm = m->sm, ptx_v = m->ptx;
    kiln_lint_free(r);
    snprintf(name, sizeof name, "%s", label);
    add_job(js, name, strdup(ptx), target, 0);
    /* a newer toolchain's .version (Triton's bundled ptxas writes 9.4): ptxas and lint --cuda must refuse it;
     * and a .version newer than this ptxas is checked at the newest it takes */
    const kiln_cuda_release *rel = kiln_cuda_release_of(ptxas_cuda);
    int top = rel && ptx_v > rel->ptx ? rel->ptx : ptx_v;
    snprintf(name, sizeof name, "%s as .version 9.4", label);
    if (ptx_v < 94) add_job(js, name, relabel(ptx, NULL, 94), target, 0);
    if (top != ptx_v) {
        snprintf(name, sizeof name, "%s as %s %d.%d", label, target, top / 10, top % 10);
        add_job(js, name, relabel(ptx, NULL, top), target, 0);
    }
    ptx_v = top;
    static const int ptx8[] = {81, 83, 85, 87}; /* the 8.x features, at the module's own target only */
    for (size_t v = 0; v < sizeof ptx8 / sizeof *ptx8; v++) {
        if (ptx8[v] >= ptx_v || ptx8[v] < target_ptx(target)) continue;
        snprintf(name, sizeof name, "%s as %s %d.%d", label, target, ptx8[v] / 10, ptx8[v] % 10);
        add_job(js, name, relabel(ptx, NULL, ptx8[v]), target, 0);
    }
    /* Blackwell code: every other Blackwell target, plain, arch- and family-specific (sm_101 is CUDA 12.9's
     * name of sm_110: this ptxas does not know it), at the file's .version or the target's minimum */
    static const char *const blackwell[] = {"sm_100", "sm_100a", "sm_100f", "sm_103", "sm_103a", "sm_103f",
                                            "sm_110", "sm_110a", "sm_110f", "sm_120", "sm_120a", "sm_120f",
                                            "sm_121", "sm_121a", "sm_121f"};
    for (size_t b = 0; sm >= 100 && b < sizeof blackwell / sizeof *blackwell; b++) {
        int ver = target_ptx(blackwell[b]) > ptx_v ? target_ptx(blackwell[b]) : ptx_v;
        if (!strcmp(blackwell[b], target) || (rel && ver > rel->ptx)) continue;
        snprintf(name, sizeof name, "%s as %s %d.%d", label, blackwell[b], ver / 10, ver % 10);
        add_job(js, name, relabel(ptx, blackwell[b], ver), blackwell[b], 0);
    }
    for (size_t s = 0; s < sizeof lower_sms / sizeof *lower_sms; s++)
        for (size_t v = 0; v <= sizeof lower_versions / sizeof *lower_versions; v++) {
            int tsm = lower_sms[s],
                ver = v < sizeof lower_versions / sizeof *lower_versions ? lower_versions[v] : ptx_v;
            if (tsm > sm || ver > ptx_v || (tsm == sm && ver == ptx_v && target[strlen(target) - 1] != 'a')) continue;
            char t[16];
            gen_lint_sm_name(tsm, false, t);
            snprintf(name, sizeof name, "%s as %s %d.%d", label, t, ver / 10, ver % 10);
            add_job(js, name, relabel(ptx, t, ver), t, 0);
        }
}

static void corpus_jobs(jobs *js, const char *dir, int *files) {
    DIR *d = opendir(dir);
    CHECK(d != NULL, "no lint corpus at %s", dir);
    if (!d) return;
    struct dirent *e;
    char *names[256];
    int n = 0;
    while ((e = readdir(d)) && n < 256) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".ptx")) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        char *text = NULL;
        size_t len = 0;
        if (f) {
            fseek(f, 0, SEEK_END);
            len = (size_t)ftell(f);
            fseek(f, 0, SEEK_SET);
            text = malloc(len + 1);
            len = fread(text, 1, len, f);
            text[len] = '\0';
            fclose(f);
        }
        CHECK(text != NULL, "cannot read %s", path);
        if (text) {
            fuzz_one(text, len);
            variant_jobs(js, names[i], text);
            (*files)++;
        }
        free(text);
        free(names[i]);
    }
}

/* One generated module, and for sm_90 what a user gets by hand-editing its .target down. */
static void kiln_variant(jobs *js, kiln_gen *gen, const char *spec, int sm, bool relabel_down, int *generated) {
    kiln_module *m = NULL;
    kiln_error err = {0};
    char target[16], name[256];
    if (kiln_generate(gen, spec, sm, KILN_EMIT_PTX, &m, &err) != KILN_OK) {
        CHECK(0, "%s sm_%d: %s", spec, sm, err.msg);
        return;
    }
    gen_lint_sm_name(sm, false, target);
    snprintf(name, sizeof name, "kiln %s (sm_%d)", spec, sm);
    add_job(js, name, strdup(kiln_module_text(m)), target, 0);
    (*generated)++;
    for (int k = 0; relabel_down && k < 2; k++) {
        const char *low = k ? "sm_80" : "sm_75";
        snprintf(name, sizeof name, "kiln %s (sm_%d as %s)", spec, sm, low);
        add_job(js, name, relabel(kiln_module_text(m), low, 0), low, 0);
    }
    kiln_module_free(m);
}

/* kiln's own PTX: every LayerNorm dtype combination and attention dtype/head size on every SM. */
static void kiln_jobs(jobs *js, int *generated) {
    kiln_gen *gen = NULL;
    kiln_error err = {0};
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) {
        CHECK(0, "generator: %s", err.msg);
        return;
    }
    static const char *dt[] = {"f32", "f16", "bf16"};
    char spec[96];
    for (size_t s = 0; s < sizeof lower_sms / sizeof *lower_sms; s++) {
        int sm = lower_sms[s];
        for (int x = 0; x < 3; x++) {
            for (int w = 0; w < 3; w++)
                for (int y = 0; y < 3; y++) {
                    snprintf(spec, sizeof spec, "layernorm x=%s w=%s y=%s hidden=768", dt[x], dt[w], dt[y]);
                    kiln_variant(js, gen, spec, sm, sm == 90, generated);
                    if (sm != 75 && sm != 90) continue;
                    snprintf(spec, sizeof spec, "layernorm x=%s w=%s y=%s hidden=launch", dt[x], dt[w], dt[y]);
                    kiln_variant(js, gen, spec, sm, false, generated);
                }
            for (int hd = 64; hd <= 128; hd += 64)
                for (int causal = 0; causal < 2; causal++) {
                    snprintf(spec, sizeof spec, "attention dtype=%s head_dim=%d causal=%s", dt[x], hd,
                             causal ? "true" : "false");
                    kiln_variant(js, gen, spec, sm, sm == 90 && hd == 64 && !causal, generated);
                }
        }
    }
    kiln_gen_destroy(gen);
}

static void test_ground_truth(void) {
    const char *ptxas = ptxas_path();
    if (ptxas) read_ptxas_release(ptxas);
    jobs js = {0};
    snprintf(js.dir, sizeof js.dir, "/tmp/kiln-lint-XXXXXX");
    if (!mkdtemp(js.dir)) {
        CHECK(0, "mkdtemp failed");
        return;
    }
    int corpus_files = 0, generated = 0;
    char corpus[1024];
    const char *src = getenv("KILN_SRC");
    snprintf(corpus, sizeof corpus, "%s/tests/lint", src ? src : ".");

    TEST_BEGIN("corpus files lint and survive mutation");
    corpus_jobs(&js, corpus, &corpus_files);
    CHECK(corpus_files >= 10, "only %d corpus files in %s", corpus_files, corpus);
    TEST_END();
    size_t n_corpus = js.n;
    TEST_BEGIN("kiln's own PTX");
    kiln_jobs(&js, &generated);
    TEST_END();
    size_t n_kiln = js.n;
    table_jobs(&js);

    if (!ptxas) {
        printf("SKIP lint vs ptxas: no ptxas (set PTXAS or CUDA_HOME); %zu files not checked\n", js.n);
        skipped += 3;
    } else {
        struct timespec a, b;
#if defined(__SANITIZE_ADDRESS__)
        /* the sanitizer build lints every file but assembles only every third nvcc/kiln variant */
        for (size_t i = 0; i < n_kiln; i++) js.v[i].lint_only = i % 3 != 0;
        printf("  sanitizer build: ptxas checks every third corpus and kiln file; all are linted\n");
#endif
        clock_gettime(CLOCK_MONOTONIC, &a);
        run_jobs(ptxas, &js, 2);
        clock_gettime(CLOCK_MONOTONIC, &b);
        static const char *const part[] = {"corpus (nvcc, Triton, by hand), as compiled and relabeled", "kiln's own output",
                                           "requirement table rows"};
        size_t from = 0, to[] = {n_corpus, n_kiln, js.n};
        tally all = {0};
        for (int p = 0; p < 3; p++) {
            tally t = {0};
            int bad = 0;
            TEST_BEGIN(part[p]);
            for (size_t i = from; i < to[p]; i++) {
                if (!js.v[i].lint_only) {
                    bad += compare(&js.v[i], &t) > 0;
                    continue;
                }
                kiln_lint_report *r = NULL;
                kiln_error err = {0};
                CHECK(kiln_lint(js.v[i].ptx, strlen(js.v[i].ptx), 0, &r, &err) == KILN_OK, "%s: %s", js.v[i].name,
                      err.msg);
                kiln_lint_free(r);
            }
            CHECK(bad == 0, "%d files disagree with ptxas", bad);
            TEST_END();
            printf("  lint vs ptxas, %s: %d files (%d accepted by ptxas), ptxas arch errors %d on %d lines, "
                   "lint findings %d, misses %d, false alarms %d, other ptxas errors %d\n",
                   part[p], t.files, t.accepted, t.arch_errors, t.arch_lines, t.findings, t.misses, t.false_alarms,
                   t.other_errors);
            all.files += t.files, all.accepted += t.accepted, all.arch_errors += t.arch_errors;
            all.arch_lines += t.arch_lines, all.findings += t.findings, all.misses += t.misses;
            all.false_alarms += t.false_alarms, all.other_errors += t.other_errors;
            from = to[p];
        }
        printf("lint vs ptxas: %d files (%d corpus sources, %d kiln variants), %d accepted; ptxas arch errors %d on %d "
               "lines; lint findings %d; misses %d; false alarms %d (ptxas: %.1f s)\n",
               all.files, corpus_files, generated, all.accepted, all.arch_errors, all.arch_lines, all.findings,
               all.misses, all.false_alarms, (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    }
    for (size_t i = 0; i < js.n; i++) {
        unlink(js.v[i].path), unlink(js.v[i].log);
        free(js.v[i].ptx);
        for (int k = 0; k < js.v[i].ex_count; k++) free(js.v[i].ex_names[k]);
        free(js.v[i].ex_names);
    }
    rmdir(js.dir);
    free(js.v);
}

int main(void) {
    test_basic();
    test_syntax();
    test_checks();
    test_bad_input();
    test_issue14();
    test_table_self();
    test_ground_truth();
    printf("lint: %d passed, %d failed, %d skipped\n", check_passed, check_failed, skipped);
    return check_failed ? 1 : 0;
}
