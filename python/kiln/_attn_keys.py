"""Issue 24's attention keys for kiln.emulate and kiln.Runtime: causal, window, softcap, ALiBi, dropout, v_head_dim,
checked once."""

from .errors import KilnArgumentError

_CAUSAL = {False: "false", True: "true", "false": "false", "true": "true", "bottom_right": "true",
           "top_left": "top_left"}
CAUSAL_CODE = {"false": 0, "true": 1, "top_left": 2}  # KILN_CAUSAL_* (kiln/runtime.h)
ROTARY_CODE = {"none": 0, "neox": 1, "interleaved": 2}  # KILN_ROTARY_* (kiln/runtime.h)


def rotary_value(rotary, what):
    """The spec's rotary value for rotary=None / "none", "neox" (GPT-NeoX halves) or "interleaved" (GPT-J pairs)."""
    key = "none" if rotary is None else rotary
    if not isinstance(key, str) or key not in ROTARY_CODE:
        raise KilnArgumentError("%s: rotary=%r; valid: None, 'neox' (GPT-NeoX halves), 'interleaved' (GPT-J pairs)"
                                % (what, rotary))
    return key


def causal_value(causal, what):
    """The spec's causal value: False, True / "bottom_right" (query i sees key j iff j <= i + seq_k - seq_q),
    or "top_left" (iff j <= i: torch's is_causal)."""
    key = causal if isinstance(causal, (bool, str)) else None
    if key not in _CAUSAL:
        raise KilnArgumentError("%s: causal=%r; valid: False, True (bottom-right aligned), 'bottom_right', "
                                "'top_left' (torch's is_causal)" % (what, causal))
    return _CAUSAL[key]


def check_v_head_dim(what, q_shape, k_shape, v_shape):
    """V's head dim (v_head_dim, templates/lib/attn_vdim.lua) of q [batch, seq_q, heads_q, d], k [batch, seq_k,
    heads_kv, d] and v [batch, seq_k, heads_kv, dv]: dv may differ from d (MLA: qk 192, v 128) when it is a
    multiple of 8 from 8 to 256; o (and dO) are then [.., dv]."""
    q_shape, k_shape, v_shape = tuple(q_shape), tuple(k_shape), tuple(v_shape)
    d, dv = q_shape[3], v_shape[3]
    if k_shape[0] != q_shape[0] or k_shape[3] != d:
        raise KilnArgumentError("%s: k shape %s does not fit q %s (batch and head_dim must match)"
                                % (what, k_shape, q_shape))
    if v_shape[:3] != k_shape[:3]:
        raise KilnArgumentError("%s: k has shape %s and v %s; their batch, seq_k and heads_kv must match (v's "
                                "head_dim may differ: v_head_dim)" % (what, k_shape, v_shape))
    if dv != d and (dv % 8 or not 8 <= dv <= 256):
        raise KilnArgumentError("%s: v's head_dim %d differs from q's %d; valid: q's head_dim, or a multiple of 8 "
                                "from 8 to 256 (v_head_dim: v and o are that wide)" % (what, dv, d))
    return dv


def refuse_v_head_dim(what, d, dv, kernel):
    """One line refusing v of another head dim on a kernel not built with v_head_dim (varlen, paged, append)."""
    if dv != d:
        raise KilnArgumentError("%s: v's head_dim %d differs from q/k's %d; the %s kernel is not built with "
                                "v_head_dim (the dense and split-KV kernels are): give v q's head_dim" % (what, dv, d,
                                                                                                          kernel))


def _dropout(what, dropout):
    """(p, seed, offset) checked, or None: dropout=(p, seed, offset) with 0 <= p < 1 and seed, offset whole numbers
    0..2^53 (the Philox key and counter of templates/lib/attn_dropout.lua)."""
    if dropout is None:
        return None
    ok = isinstance(dropout, (tuple, list)) and len(dropout) == 3
    if ok:
        p, seed, offset = dropout
        ok = (isinstance(p, (int, float)) and not isinstance(p, bool) and 0 <= p < 1
              and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 2 ** 53 for x in (seed, offset)))
    if not ok:
        raise KilnArgumentError("%s: dropout=%r; valid: (p, seed, offset) with 0 <= p < 1 and seed, offset ints "
                                "0..2^53, e.g. (0.1, 1234, 0)" % (what, dropout))
    return (float(p), int(seed), int(offset))


class Keys:
    """The checked keys: spec words, the scalars to launch with, the slopes' row stride."""

    def __init__(self, what, window=None, softcap=None, alibi_slopes_shape=None, batch=1, heads_q=1, dropout=None):
        self.dropout = _dropout(what, dropout)
        self.window = None
        if window is not None:
            if (not isinstance(window, (tuple, list)) or len(window) != 2
                    or not all(isinstance(x, int) and not isinstance(x, bool) and x >= -1 for x in window)):
                raise KilnArgumentError("%s: window=%r; valid: (left, right), each an int >= -1 (-1: unbounded), "
                                        "e.g. (4095, 0)" % (what, window))
            self.window = (int(window[0]), int(window[1]))
        self.softcap = None
        if softcap is not None and softcap != 0:
            try:
                cap = float(softcap)
            except (TypeError, ValueError):
                cap = float("nan")
            if not (cap > 0) or cap == float("inf"):
                raise KilnArgumentError("%s: softcap=%r; valid: a finite number > 0 (None or 0: no softcap)"
                                        % (what, softcap))
            self.softcap = cap
        self.alibi_stride = None
        if alibi_slopes_shape is not None:
            shape = tuple(alibi_slopes_shape)
            if shape == (heads_q,):
                self.alibi_stride = 0
            elif shape == (batch, heads_q):
                self.alibi_stride = heads_q
            else:
                raise KilnArgumentError("%s: alibi_slopes has shape %s; valid: [heads_q] = (%d,) or [batch, heads_q] = "
                                        "(%d, %d), f32" % (what, shape, heads_q, batch, heads_q))

    def words(self):
        """' window=true softcap=true alibi=true', those that are on."""
        return "".join(" %s=true" % k for k, on in (("window", self.window is not None),
                                                     ("softcap", self.softcap is not None),
                                                     ("alibi", self.alibi_stride is not None),
                                                     ("dropout", self.dropout is not None)) if on)

    def scalars(self):
        s = {}
        if self.window is not None:
            s["window_left"], s["window_right"] = self.window
        if self.softcap is not None:
            s["softcap"] = self.softcap
        if self.alibi_stride is not None:
            s["alibi_stride"] = self.alibi_stride
        if self.dropout is not None:
            s["dropout_p"], s["dropout_seed"], s["dropout_offset"] = self.dropout
        return s

    def fill(self, mask, slopes_ptr):
        """Sets a kiln_attention_mask (ctypes) from the keys."""
        if self.window is not None:
            mask.window, (mask.window_left, mask.window_right) = 1, self.window
        if self.softcap is not None:
            mask.softcap = self.softcap
        if self.alibi_stride is not None:
            mask.alibi_slopes, mask.alibi_stride = slopes_ptr, self.alibi_stride
        if self.dropout is not None:
            mask.dropout_p, mask.dropout_seed, mask.dropout_offset = self.dropout


def forward_spec(dt, od, d, cv, path, words, vdim_words="", tail=""):
    """The attention forward's spec as kiln.emulate's dense, varlen and paged paths load it: dtype, out, head_dim
    (then vdim_words, ' v_head_dim=N' or ''), causal, path, the mask/dropout words, then tail (their own keys)."""
    return "attention dtype=%s out=%s head_dim=%d%s causal=%s path=%s%s%s" % (dt, od, d, vdim_words, cv, path, words,
                                                                              tail)
