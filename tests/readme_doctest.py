#!/usr/bin/env python3
"""tests/readme_doctest.py - README.md's examples are true, and README.md still reads as a README.

Every example session in README.md (an indented or fenced code block whose lines start with "$ ")
is run in a fresh temporary directory, its commands in order, with `kiln` meaning the kiln under
test and the repository's top-level entries linked in (so `tests/lint/...` paths work; outputs land
in the temporary directory). What the README shows under a command must be what the command prints
(stdout then stderr), line for line; a line "..." stands for any number of lines and "[...]" inside
a line for any text (timings). A command whose shown output starts with "kiln: error:" must fail
with exit status 2; a command shown without output must succeed; `$?` is the previous command's.
Shape checks (README.md and docs/*.md): not absurdly long, no line absurdly long, no paragraph
repeated — the damage a runaway scripted edit does.

Every ```python block in README.md runs as written, in a fresh temporary directory, with the source
tree's package (python/, libraries from lib/ or $KILN_LIB_DIR), except the lines marked as needing a
GPU — a trailing comment that starts "# GPU" — which become `pass` (KILN_README_GPU=1 runs them too, on
a machine with a GPU and torch). Every name a block uses, GPU lines included, must be bound earlier in the
block (an import, an assignment) or be a builtin; running in an empty directory, a block can read only
the files it wrote.

usage: readme_doctest.py KILN [README] [DOCS_DIR]
"""
import ast
import builtins
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tokenize

MAX_README_LINES = 700
MAX_DOC_LINES = 2500
MAX_LINE_CHARS = 1000

OPTIONAL_TOOLS = ("ptxas",)

passed = failed = skipped = 0


def ok(name):
    global passed
    passed += 1
    if os.environ.get("KILN_TEST_VERBOSE"):
        print(f"ok   {name}")


def skip(name, why):
    global skipped
    skipped += 1
    print(f"skip {name}: {why}")


def bad(name, why):
    global failed
    failed += 1
    print(f"FAIL {name}: {why}")


def sessions(lines):
    """Yields (first line number, [lines]) for each code block holding '$ ' commands."""
    block, start, fenced = [], 0, False
    def flush():
        if any(l.startswith("$ ") for l in block):
            yield start, list(block)
    for i, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        if line.strip().startswith("```"):
            if fenced:
                yield from flush()
                block = []
            fenced = not fenced
            start = i + 1
            continue
        if fenced:
            block.append(line)
        elif line.startswith("    "):
            if not block:
                start = i
            block.append(line[4:])
        else:
            yield from flush()
            block = []
    yield from flush()


def split_commands(block):
    """[(command, [expected lines])] from a session's lines."""
    out = []
    for line in block:
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return out


def matches(expected, actual):
    """Line-by-line equality where an expected line '...' matches any run of lines."""
    if not expected:
        return not actual
    if expected[0].strip() == "...":
        return any(matches(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and line_matches(expected[0], actual[0]) and matches(expected[1:], actual[1:])


def line_matches(expected, actual):
    expected, actual = expected.rstrip(), actual.rstrip()
    if "[...]" not in expected:
        return expected == actual
    pattern = ".*".join(re.escape(part) for part in expected.split("[...]"))
    return re.fullmatch(pattern, actual) is not None


def run_session(kiln, root, start, block):
    work = tempfile.mkdtemp(prefix="kiln_readme_")
    bindir = os.path.join(work, ".bin")
    os.mkdir(bindir)
    os.symlink(os.path.abspath(kiln), os.path.join(bindir, "kiln"))
    for entry in os.listdir(root):
        if not entry.startswith("."):
            os.symlink(os.path.join(root, entry), os.path.join(work, entry))
    cuda_bin = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin")  # ptxas, as the other tests find it
    env = dict(os.environ, PATH=os.pathsep.join([bindir, os.environ.get("PATH", ""), cuda_bin]), KILN_CACHE="0")
    status = 0
    try:
        for cmd, expected in split_commands(block):
            name = f"README line {start}: $ {cmd}"
            tool = cmd.split()[0] if cmd.split() else ""
            if tool in OPTIONAL_TOOLS and not shutil.which(tool, path=env["PATH"]):
                skip(name, f"{tool} is not installed (the CUDA toolkit is optional)")
                continue
            p = subprocess.run(f"(exit {status}); {cmd}", shell=True, cwd=work, env=env, capture_output=True,
                               text=True, timeout=300)
            status = p.returncode
            actual = (p.stdout + p.stderr).splitlines()
            want_error = bool(expected) and expected[0].startswith("kiln: error:")
            if want_error and p.returncode != 2:
                bad(name, f"shown as an error but exited {p.returncode}")
            elif not expected and p.returncode != 0:
                bad(name, f"shown without output but exited {p.returncode}: {(p.stdout + p.stderr)[-400:]}")
            elif expected and not matches(expected, actual):
                diff = "\n".join(["  README shows:"] + ["    " + l for l in expected[:12]] +
                                 ["  kiln printed:"] + ["    " + l for l in actual[:12]])
                bad(name, "output differs\n" + diff)
            else:
                ok(name)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def python_blocks(lines):
    """Yields (first line number, source) for each ```python fenced block."""
    block, start = None, 0
    for i, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        if block is None and line.strip() == "```python":
            block, start = [], i + 1
        elif block is not None and line.strip().startswith("```"):
            yield start, "\n".join(block) + "\n"
            block = None
        elif block is not None:
            block.append(line)


GPU_MARK = re.compile(r"#\s*GPU\b")


def gpu_line(line):
    """A line whose trailing comment starts with "# GPU" (a '#' inside a string literal does not count)."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(line + "\n").readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    return any(t.type == tokenize.COMMENT and GPU_MARK.match(t.string) for t in toks)


def without_gpu_lines(src):
    out = []
    for line in src.splitlines():
        if gpu_line(line):
            out.append(line[:len(line) - len(line.lstrip())] + "pass")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def unbound_names(src):
    """[(line, name)] loaded before any binding of them in src (or never bound), builtins aside."""
    tree = ast.parse(src)
    first_bound = {}

    def bind(name, line):
        first_bound[name] = min(first_bound.get(name, line), line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bind(node.id, node.lineno)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                bind((a.asname or a.name).split(".")[0], node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind(node.name, node.lineno)
        elif isinstance(node, ast.arg):
            bind(node.arg, 0)  # parameters are bound inside their function
    return [(n.lineno, n.id) for n in ast.walk(tree)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and not hasattr(builtins, n.id)
            and not first_bound.get(n.id, 1 << 30) <= n.lineno]


def run_python_block(root, start, src):
    name = f"README line {start}: python block"
    try:
        full = unbound_names(src)
        cpu = without_gpu_lines(src)
        cpu_only = unbound_names(cpu)
    except SyntaxError as e:
        bad(name, f"does not parse: {e}")
        return
    unbound = sorted(set((start + ln - 1, n) for ln, n in full + cpu_only))
    if unbound:
        bad(name, "names used before they are bound: " + ", ".join(f"'{n}' (README line {ln})" for ln, n in unbound))
        return
    gpu = os.environ.get("KILN_README_GPU") == "1"
    if os.environ.get("O", "build") != "build" and not os.environ.get("KILN_LIB_DIR"):
        skip(name, "the plain pass (O=build) runs the Python blocks")
        return
    # a block whose CPU lines import torch (kiln.torch's emulated path) needs torch everywhere
    torch_cpu = re.search(r"^\s*(import torch\b|import kiln\.(torch|flash_attn)\b|from kiln\.(torch|flash_attn)\b)", cpu,
                          re.M)
    missing = [m for m in ("numpy", "ml_dtypes") + (("torch",) if gpu or torch_cpu else ())
               if not importlib.util.find_spec(m)]
    if missing:
        skip(name, "python3 lacks " + " ".join(missing))
        return
    work = tempfile.mkdtemp(prefix="kiln_readme_py_")
    script = os.path.join(work, "readme_block.py")
    with open(script, "w") as f:
        f.write(src if gpu else cpu)
    env = dict(os.environ, KILN_CACHE="0", PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join([os.path.join(root, "python")] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    try:
        p = subprocess.run([sys.executable, script], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            bad(name, f"exited {p.returncode}{' (GPU lines included)' if gpu else ''}:\n" + (p.stdout + p.stderr)[-1500:])
        else:
            ok(name)
            if os.environ.get("KILN_TEST_VERBOSE"):
                print(p.stdout, end="")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def shape(path, max_lines):
    text = open(path, encoding="utf-8").read()
    lines = text.splitlines()
    name = os.path.relpath(path)
    if len(lines) > max_lines:
        bad(f"{name} length", f"{len(lines)} lines (at most {max_lines}: move long tables to docs/)")
    else:
        ok(f"{name} length")
    longest = max((len(l) for l in lines), default=0)
    if longest > MAX_LINE_CHARS:
        bad(f"{name} line length", f"a line of {longest} characters")
    else:
        ok(f"{name} line length")
    seen, repeated = set(), []
    for para in re.split(r"\n\s*\n", text):
        key = " ".join(para.split())
        if len(key) < 60 or key.startswith("|"):
            continue
        if key in seen:
            repeated.append(key[:80])
        seen.add(key)
    if repeated:
        bad(f"{name} repeated paragraphs", f"{len(repeated)}, first: {repeated[0]!r}")
    else:
        ok(f"{name} repeated paragraphs")
    return lines


def main():
    kiln = sys.argv[1] if len(sys.argv) > 1 else "bin/kiln"
    readme = sys.argv[2] if len(sys.argv) > 2 else "README.md"
    docs = sys.argv[3] if len(sys.argv) > 3 else "docs"
    lines = shape(readme, MAX_README_LINES)
    n = 0
    for start, block in sessions(lines):
        n += 1
        run_session(kiln, os.path.dirname(os.path.abspath(readme)), start, block)
    if n == 0:
        bad("README examples", "no '$ kiln' example found")
    blocks = list(python_blocks(lines))
    if not blocks:
        bad("README Python examples", "no ```python block found")
    for start, src in blocks:
        run_python_block(os.path.dirname(os.path.abspath(readme)), start, src)
    if os.path.isdir(docs):
        for f in sorted(os.listdir(docs)):
            if f.endswith(".md"):
                shape(os.path.join(docs, f), MAX_DOC_LINES)
    print(f"readme: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
