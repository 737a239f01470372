"""kiln._extents - how many elements a kernel's pointer parameter spans, from the kernel's own scalars.

Kernel metadata names each parameter but does not say how far a pointer reaches, so the
generic binders (emulator and runtime) size-check a pointer whose name follows one of kiln's
conventions below: the row-major norm tensors (x, y, dy, dx over rows x hidden; per-column
weight/bias over hidden; per-row statistics over rows) and the strided attention tensors
([batch, seq, heads, head_dim] with per-tensor strides). The variables are the kernel's scalar
arguments plus the canonical spec's numeric values (hidden=4096, head_dim=64). A pointer whose
name is not here, or whose formula needs a variable the kernel lacks, is checked for dtype and
alignment only.
"""

_ROWS_HIDDEN = "rows * hidden"


def _attn(t, heads, seq):
    return ("(batch - 1) * stride_{t}b + ({seq} - 1) * stride_{t}s + ({heads} - 1) * stride_{t}h + head_dim"
            .format(t=t, heads=heads, seq=seq))


EXTENTS = {
    "x": _ROWS_HIDDEN, "y": _ROWS_HIDDEN, "dy": _ROWS_HIDDEN, "dx": _ROWS_HIDDEN,
    "residual": _ROWS_HIDDEN, "h": _ROWS_HIDDEN, "dres": _ROWS_HIDDEN,
    "dweight": "cols", "dbias": "cols",
    "weight": "hidden", "bias": "hidden",
    "mean": "rows", "rstd": "rows",
    "q": _attn("q", "heads_q", "seq_q"), "o": _attn("o", "heads_q", "seq_q"),
    "k": _attn("k", "heads_kv", "seq_k"), "v": _attn("v", "heads_kv", "seq_k"),
    "lse": "batch * heads_q * seq_q",
}


def variables(spec_values, scalars):
    """Numeric spec values (hidden=4096) overlaid by the kernel's scalar arguments."""
    env = {}
    for k, v in spec_values.items():
        try:
            env[k] = int(v)
        except (TypeError, ValueError):
            pass
    env.update({k: v for k, v in scalars.items() if isinstance(v, int)})
    return env


def extent(name, env):
    """Elements the pointer `name` spans, or None when kiln cannot tell."""
    expr = EXTENTS.get(name)
    if expr is None:
        return None
    try:
        n = eval(expr, {"__builtins__": {}}, env)  # expressions are the constants above, never user text
    except NameError:
        return None
    return max(int(n), 0)
