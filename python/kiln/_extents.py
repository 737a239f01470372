"""kiln._extents - how many elements a kernel's pointer parameter spans, from its launch description.

A kernel's metadata carries the launch problem its template declares (``meta["launch"]``, docs/registry.md):
each tensor's dims as expressions in the kernel's scalars, and for strided tensors the parameters that hold
their strides. A tensor spans 1 + sum over its axes of (dim - 1) * stride elements (its strides: the
stride parameters' values, else contiguous in its dims). The variables are the kernel's scalar arguments
plus the canonical spec's numeric values (hidden=4096, head_dim=64). A pointer the description does not
declare, a module from a kiln before it, or a dim that needs a value the kernel lacks (the grid) is
checked for dtype and alignment only.
"""

import re

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(.))")
_FUNCS = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}


def _eval(text, env):
    """An expression of the launch description's grammar (integers, names, + - * /, parentheses, cdiv,
    min, max), parsed here (the text may come from a bundle file: nothing is handed to Python's eval).
    Raises KeyError for an unknown name, ValueError for anything malformed."""
    toks = [m.groups() for m in _TOKEN.finditer(text)]
    pos = [0]

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else (None, None, None)

    def take(ch):
        if peek()[2] != ch:
            raise ValueError("expected %r in %r" % (ch, text))
        pos[0] += 1

    def factor():
        num, name, ch = peek()
        pos[0] += 1
        if num is not None:
            return int(num)
        if ch == "(":
            v = expr()
            take(")")
            return v
        if ch == "-":
            return -factor()
        if name is not None:
            if peek()[2] == "(":
                if name not in _FUNCS:
                    raise ValueError("unknown function %r" % name)
                take("(")
                a = expr()
                take(",")
                b = expr()
                take(")")
                return _FUNCS[name](a, b)
            return env[name]
        raise ValueError("malformed expression %r" % text)

    def term():
        v = factor()
        while peek()[2] in ("*", "/"):
            op = peek()[2]
            pos[0] += 1
            b = factor()
            v = v * b if op == "*" else v // b
        return v

    def expr():
        v = term()
        while peek()[2] in ("+", "-"):
            op = peek()[2]
            pos[0] += 1
            b = term()
            v = v + b if op == "+" else v - b
        return v

    v = expr()
    if pos[0] != len(toks):
        raise ValueError("trailing text in %r" % text)
    return v


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


def extent(name, env, launch):
    """Elements the pointer `name` spans per the launch description `launch`, or None when kiln cannot tell."""
    lines = [l.split() for l in (launch or "").splitlines()]
    decl = next((w for w in lines if len(w) >= 4 and w[0] == "tensor" and w[1] == name), None)
    if decl is None:
        return None
    dims = [d for d in decl[3:] if "=" not in d]
    strides = {int(w[3]): w[1] for w in lines if len(w) == 4 and w[0] == "stride" and w[2] == name}
    try:
        sizes = [_eval(d, env) for d in dims]
        if any(s <= 0 for s in sizes):
            return 0
        total, contiguous = 1, 1
        for axis in reversed(range(len(sizes))):
            stride = env[strides[axis]] if axis in strides else contiguous
            total += (sizes[axis] - 1) * stride
            contiguous *= sizes[axis]
    except (KeyError, ValueError, ZeroDivisionError):
        return None
    return max(int(total), 0)
