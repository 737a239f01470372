"""kiln.transformers - kiln's attention (and norms) inside Hugging Face transformers models, through transformers'
AttentionInterface.

    import kiln.transformers
    kiln.transformers.register()                  # "kiln" in AttentionInterface and AttentionMaskInterface
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="kiln")
    kiln.torch.swap_norms(model)                  # or, both in one call:
    model = kiln.transformers.from_pretrained(AutoModelForCausalLM, name)

The attention function takes transformers' calling convention (module, query, key, value, attention_mask, dropout,
scaling, sliding_window, softcap, is_causal, ...; query/key/value [batch, heads, seq, head_dim], GQA with fewer key
heads, value's head_dim may differ from query's as in MLA models) and runs kiln.flash_attn: causal bottom-right
aligned (prefill and cached decoding alike), the model's sliding window as FlashAttention's window_size
(sliding_window - 1 keys before the query, as transformers' masks count them), its logit softcap, its scaling
(default query's head_dim ** -0.5). Padding arrives as transformers' 2-d mask (register() gives "kiln" the mask
function of FlashAttention's integration): the kept queries and keys are unpadded and run through
flash_attn_varlen_func, the output scattered back (rows at padded queries are 0, as FlashAttention writes them).
Packed sequences (cu_seq_lens_q/k and max_length_q/k in the kwargs, as transformers' padding-free path passes them)
run varlen directly. transformers is imported only when register() runs; it is not a dependency of kiln.
"""

import torch

from . import flash_attn as fa
from . import torch as kt
from .errors import KilnArgumentError, KilnUnavailableError

NAME = "kiln"


def _fail(msg):
    raise KilnArgumentError("kiln.transformers attention: " + msg)


def _cu(lengths):
    return torch.nn.functional.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))


def _padded(q, k, v, mask, kw):
    """Attention over the kept (mask True) keys of each sequence; queries: the last seq_q positions of the mask (all
    of them at decoding, seq_q = 1). q [batch, seq_q, heads, d], k/v [batch, seq_k, heads_kv, d]."""
    b, sq = q.shape[:2]
    sk = k.shape[1]
    keep_k = mask[:, -sk:].to(device=q.device, dtype=torch.bool)
    if keep_k.shape != (b, sk):
        _fail("attention_mask of shape %s does not cover the %d keys of %d sequences" % (list(mask.shape), sk, b))
    keep_q = torch.ones((b, sq), dtype=torch.bool, device=q.device) if sq == 1 else keep_k[:, -sq:]
    if keep_q.shape != (b, sq):
        _fail("attention_mask of shape %s is shorter than the %d queries" % (list(mask.shape), sq))
    lq, lk = keep_q.sum(1), keep_k.sum(1)
    out = fa.flash_attn_varlen_func(q[keep_q], k[keep_k], v[keep_k], _cu(lq), _cu(lk), int(lq.max()), int(lk.max()),
                                    **kw)
    return out.new_zeros(q.shape[:-1] + out.shape[-1:]).index_put((keep_q,), out)


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
                      softcap=None, is_causal=None, s_aux=None, **kwargs):
    """transformers' attention function signature on kiln.flash_attn; returns (attn_output [batch, seq, heads,
    head_dim], None): kiln never forms the attention weights (output_attentions gives None, as FlashAttention's)."""
    if s_aux is not None:
        _fail("s_aux (learned attention sinks) is not supported by kiln's attention; use attn_implementation='eager'")
    d, dv = query.shape[-1], value.shape[-1]
    if key.shape[-1] != d:
        _fail("key head_dim %d differs from query head_dim %d; they must be equal" % (key.shape[-1], d))
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    window = (-1, -1) if sliding_window is None else (int(sliding_window) - 1, int(sliding_window) - 1)
    kw = dict(dropout_p=dropout, softmax_scale=d ** -0.5 if scaling is None else scaling, causal=causal,
              window_size=window, softcap=float(softcap) if softcap else 0.0)
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    packed = [kwargs.get(n) for n in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")]
    varlen = all(x is not None for x in packed) and q.shape[0] == 1
    if dv != d and (varlen or attention_mask is not None):
        # the varlen kernels take one head_dim: zero columns widen the narrower side (q·k and p·v unchanged, as
        # transformers' own FlashAttention path pads an MLA model's value), then out keeps v's columns
        width = max(d, dv)
        query, key, value = (torch.nn.functional.pad(t, (0, width - t.shape[-1])) for t in (query, key, value))
        out, _ = attention_forward(module, query, key, value, attention_mask, dropout, kw["softmax_scale"],
                                   sliding_window, softcap, is_causal, **kwargs)
        return out[..., :dv], None
    if varlen:
        cq, ck, mq, mk = packed
        out = fa.flash_attn_varlen_func(q[0], k[0], v[0], cq.to(torch.int32), ck.to(torch.int32), int(mq), int(mk),
                                        **kw).unsqueeze(0)
    elif attention_mask is None:
        out = fa.flash_attn_func(q, k, v, **kw)
    elif attention_mask.dim() == 2:
        out = _padded(q, k, v, attention_mask, kw)
    else:
        _fail("attention_mask of shape %s: kiln takes None or the 2-d padding mask transformers builds for "
              "attn_implementation='%s' (kiln.transformers.register() sets that mask function)"
              % (list(attention_mask.shape), NAME))
    return out, None


def _transformers():
    try:
        import transformers  # noqa: F401
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask
    except ImportError as e:
        raise KilnUnavailableError("kiln.transformers needs the transformers package (pip install transformers): %s"
                                   % e) from e
    return AttentionInterface, AttentionMaskInterface, flash_attention_mask


def register(name=NAME):
    """Registers kiln's attention as attn_implementation=name (default "kiln") in transformers' AttentionInterface,
    with FlashAttention's mask function (None, or the 2-d padding mask) in AttentionMaskInterface. Idempotent."""
    attention, masks, fa_mask = _transformers()
    attention.register(name, attention_forward)
    masks.register(name, fa_mask)
    return name


def enable(model, norms=True, name=NAME):
    """Switches a built transformers model to kiln: registers and sets attn_implementation=name, and with norms=True
    swaps its norms for kiln's (kiln.torch.swap_norms: LayerNorm, RMSNorm and the model-code RMSNorms, Gemma's 1 + w
    included). Returns the model."""
    register(name)
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:
        model.config._attn_implementation = name
    return kt.swap_norms(model) if norms else model


def from_pretrained(model_class, *args, norms=True, **kwargs):
    """model_class.from_pretrained(*args, attn_implementation="kiln", **kwargs) with kiln's norms swapped in (norms
    =True), in one call."""
    register()
    model = model_class.from_pretrained(*args, attn_implementation=NAME, **kwargs)
    return kt.swap_norms(model) if norms else model


def from_config(model_class, config, norms=True, **kwargs):
    """A model with random weights from a config (an Auto class's from_config, or a model class's _from_config),
    attn_implementation="kiln", kiln's norms swapped in (norms=True)."""
    register()
    make = getattr(model_class, "from_config", None) or model_class._from_config
    model = make(config, attn_implementation=NAME, **kwargs)
    return kt.swap_norms(model) if norms else model
