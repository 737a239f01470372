"""kiln._sdpa_mask - kiln.torch's scaled_dot_product_attention with an attn_mask: a key-padding mask mapped exactly
onto per-sequence key lengths.

A mask is taken when it is boolean (True: attend), or float holding only 0 and -inf (the additive form of the same),
broadcastable to [batch, heads, seq_q, seq_k], the same for every head and query row, and each batch's row a run of
True followed by False (right padding: keys 0 .. L-1 kept). Attention of query i over keys j < L is then exactly
attention over the first L keys, so each batch element runs kiln's attention on k[:, :, :L] (one launch when every
length is seq_k); a row with L = 0 gives 0, as torch does. Any other mask (left padding, per-row or per-head
patterns, arbitrary additive biases) is refused with the reason. The lengths are read to the host (one sync per
call; under torch.compile the mask's values break the graph there). With any key padded, the batch runs as one
launch of kiln's varlen kernel over the kept keys.
"""

import math

import torch


def _boolean(attn_mask):
    """attn_mask as a boolean keep-mask, or a reason string."""
    if attn_mask.dtype == torch.bool:
        return attn_mask
    if attn_mask.is_floating_point():
        zero, neg = attn_mask == 0, attn_mask == -math.inf
        if bool((zero | neg).all()):
            return zero
        return ("attn_mask is a float mask with values other than 0 and -inf (an additive bias); kiln takes a boolean "
                "key-padding mask (or its 0/-inf float form)")
    return "attn_mask has dtype %s; kiln takes a boolean key-padding mask (or its 0/-inf float form)" % attn_mask.dtype


def key_lengths(attn_mask, query, key):
    """Per batch element, the number of keys the mask keeps (a list), or a reason string when the mask is not a
    right-padding key mask. query/key: SDPA's [batch, heads, seq, head_dim] or [heads, seq, head_dim]."""
    full = tuple(query.shape[:-1]) + (key.shape[-2],)
    try:
        shape = torch.broadcast_shapes(tuple(attn_mask.shape), full)
    except RuntimeError:
        shape = None
    if shape != full:
        return "attn_mask of shape %s does not broadcast to [batch, heads, seq_q, seq_k] = %s" % (
            list(attn_mask.shape), list(full))
    if attn_mask.device.type == "meta" or type(attn_mask).__name__ == "FakeTensor":
        return ("attn_mask's values cannot be read here (a %s tensor); kiln reads the key lengths from them, so a "
                "traced graph passes the mask as a real tensor" % attn_mask.device.type)
    m = _boolean(attn_mask)
    if isinstance(m, str):
        return m
    m = m.detach().to("cpu").expand(full)
    if len(full) == 3:
        m = m.unsqueeze(0)
    row = m[:, 0, 0, :]
    if not bool((m == row[:, None, None, :]).all()):
        return ("attn_mask differs between heads or query rows; kiln takes a key-padding mask (the same for every head "
                "and query: [batch, 1, 1, seq_k], or [batch, 1, seq_q, seq_k] constant along seq_q)")
    lengths = row.sum(1)
    prefix = torch.arange(row.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
    if not bool((row == prefix).all()):
        return ("attn_mask is not right padding: kiln maps a key-padding mask onto key lengths when each batch's kept "
                "keys come first (True ... True False ... False); left padding or holes are not supported")
    return [int(x) for x in lengths.tolist()]


def attention(attention_op, query, key, value, lengths, scale):
    """softmax over each batch element's first lengths[b] keys (4-d SDPA layout [batch, heads, seq, head_dim]): through
    attention_op (kiln.torch's kiln::attention, non-causal) when no key is padded, else one launch of kiln's varlen
    kernel (kiln::flash_attention_varlen) over the kept keys; batch elements with no key give 0."""
    from . import _fa_varlen  # imports kiln.torch, which imports this module
    b, h, sq, d = query.shape
    sk = key.shape[-2]
    if all(n == sk for n in lengths):
        return attention_op(query, key, value, False, scale)[0]
    if not any(lengths):  # no key anywhere: every row sees none (O is value's head_dim wide)
        return query.new_zeros(query.shape[:-1] + value.shape[-1:])
    q = query.transpose(1, 2).reshape(b * sq, h, d)
    k, v = (torch.cat([t[i, :, :n].transpose(0, 1) for i, n in enumerate(lengths)]) for t in (key, value))
    cu_q = torch.arange(0, (b + 1) * sq, sq, dtype=torch.int32, device=query.device)
    cu_k = torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0, dtype=torch.int32).to(query.device)
    out, _ = _fa_varlen.flash_attention_varlen(q, k, v, cu_q, cu_k, sq, max(lengths), None, False, -1, -1, 0.0,
                                               float(scale), False)
    return out.view(b, sq, h, d).transpose(1, 2)
