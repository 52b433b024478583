"""Triton kernels of the kind language models are built from, written in the styles of the public libraries that
serve and train them: an attention forward pass through tensor descriptors, made in the kernel or given by the host
(Triton's fused-attention tutorial), a paged, grouped decode attention in two kernels (SGLang), rotary embeddings
applied in place (flash-attention), a large-vocabulary cross entropy that writes its gradient over the logits
(Liger-Kernel), a chunk-local cumulative sum (flash-linear-attention), an autotuned matrix product with many
configurations and grouped program order (FlagGems), and a state-space decode step that updates its state cache in
place (mamba).

Each keeps the constructs that make such kernels what they are: loop bounds that depend on the program id, lengths
and addresses loaded from memory, writes into an input's buffer, descriptors, autotuning. Their calls, references
and sizes are in ``tpu_attention_cases.py`` and ``tpu_model_cases.py``.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

_LOG2E = tl.constexpr(1.4426950408889634)
_LN2 = tl.constexpr(0.6931471805599453)

# -- attention forward: tensor descriptors, causal blocks split by the program id --------------------------------------


def attention_configs_that_fit(configs: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
    """The attention configs whose query block tiles a sequence (a block past its end would read the next head's
    rows through the flattened descriptor) and whose key block tiles the query block (the causal diagonal is walked
    in whole key blocks); wide blocks keep their 8 warps, narrow ones do not need them."""
    n_ctx = kwargs["N_CTX"]
    kept = []
    for config in configs:
        block_m, block_n = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]
        if n_ctx % block_m or block_m % block_n:
            continue
        if block_m * block_n < 128 * 64 and config.num_warps == 8:
            continue
        kept.append(config)
    return kept


def set_descriptor_blocks(nargs: dict[str, Any]) -> None:
    """A config's pre_hook: gives host-side descriptors the block shapes of the config (a query block for q and the
    output, a key block for k and v)."""
    if not isinstance(nargs["q_in"], TensorDescriptor):
        return
    head_dim = nargs["HEAD_DIM"]
    for name, block in (("q_in", "BLOCK_M"), ("out_in", "BLOCK_M"), ("k_in", "BLOCK_N"), ("v_in", "BLOCK_N")):
        nargs[name].block_shape = [nargs[block], head_dim]


def _attention_configs(pre_hook: Any) -> list[Any]:
    return [
        triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages, pre_hook=pre_hook)
        for block_m in (128, 64)
        for block_n in (64, 32, 128)
        for warps in (8, 4)
        for stages in (3, 2)
    ]


#: The attention configs for pointers, and for host-side descriptors (the same, with the hook that sets their block
#: shapes). jt refuses a pre_hook on a call with no descriptor argument, even one that would return at once there.
ATTENTION_CONFIGS = _attention_configs(None)
ATTENTION_HOST_DESCRIPTOR_CONFIGS = _attention_configs(set_descriptor_blocks)


@triton.jit
def _as_descriptor(desc_or_ptr, rows, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    # A descriptor made on the host is used as it is; a pointer gets one made here, over [rows, HEAD_DIM].
    if isinstance(desc_or_ptr, tl.tensor_descriptor):
        return desc_or_ptr
    else:
        return tl.make_tensor_descriptor(
            desc_or_ptr, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1], block_shape=[BLOCK, HEAD_DIM]
        )


@triton.jit
def _attend_key_blocks(
    acc,
    row_sum,
    row_max,
    q,
    k_desc,
    v_desc,
    seq_row,
    lo,
    hi,
    q_pos,
    qk_scale,
    BLOCK_N: tl.constexpr,
    ON_DIAGONAL: tl.constexpr,
):
    # Online softmax in base 2 over the keys [lo, hi): the running maximum and sum per query row, and the
    # accumulator rescaled whenever the maximum grows.
    key_offsets = tl.arange(0, BLOCK_N)
    for start in range(lo, hi, BLOCK_N):
        k = k_desc.load([seq_row + start, 0])
        scores = tl.dot(q, tl.trans(k)) * qk_scale
        if ON_DIAGONAL:
            visible = q_pos[:, None] >= (start + key_offsets)[None, :]
            scores = tl.where(visible, scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, 1))
        weights = tl.math.exp2(scores - new_max[:, None])
        shrink = tl.math.exp2(row_max - new_max)
        row_sum = row_sum * shrink + tl.sum(weights, 1)
        v = v_desc.load([seq_row + start, 0])
        acc = tl.dot(weights.to(v.dtype), v, acc * shrink[:, None])
        row_max = new_max
    return acc, row_sum, row_max


@triton.jit
def attention_forward(
    q_in,
    k_in,
    v_in,
    out_in,
    lse_ptr,
    sm_scale,
    n_heads_total,
    N_CTX,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # One program per (query block, batch x head); q, k, v and out are [batch * heads * N_CTX, HEAD_DIM], each a
    # descriptor made on the host or a pointer this kernel makes one for, so a block is addressed by its first row.
    q_block = tl.program_id(0)
    head = tl.program_id(1)
    rows = n_heads_total * N_CTX
    q_desc = _as_descriptor(q_in, rows, HEAD_DIM, BLOCK_M)
    k_desc = _as_descriptor(k_in, rows, HEAD_DIM, BLOCK_N)
    v_desc = _as_descriptor(v_in, rows, HEAD_DIM, BLOCK_N)
    o_desc = _as_descriptor(out_in, rows, HEAD_DIM, BLOCK_M)
    seq_row = head * N_CTX
    q_start = q_block * BLOCK_M
    q_pos = q_start + tl.arange(0, BLOCK_M)
    q = q_desc.load([seq_row + q_start, 0])
    qk_scale = sm_scale * _LOG2E
    row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
    row_sum = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if CAUSAL:
        # Keys before the query block need no mask; the block on the diagonal does. Both bounds follow the
        # program id, so programs run loops of different lengths.
        acc, row_sum, row_max = _attend_key_blocks(
            acc, row_sum, row_max, q, k_desc, v_desc, seq_row, 0, q_start, q_pos, qk_scale, BLOCK_N, False
        )
        acc, row_sum, row_max = _attend_key_blocks(
            acc,
            row_sum,
            row_max,
            q,
            k_desc,
            v_desc,
            seq_row,
            q_start,
            q_start + BLOCK_M,
            q_pos,
            qk_scale,
            BLOCK_N,
            True,
        )
    else:
        acc, row_sum, row_max = _attend_key_blocks(
            acc, row_sum, row_max, q, k_desc, v_desc, seq_row, 0, N_CTX, q_pos, qk_scale, BLOCK_N, False
        )
    o_desc.store([seq_row + q_start, 0], (acc / row_sum[:, None]).to(q_desc.dtype))
    # The log-sum-exp a backward pass needs, in natural log.
    tl.store(lse_ptr + seq_row + q_pos, (row_max + tl.math.log2(row_sum)) * _LN2)


def _autotuned_attention(configs: list[Any]) -> Any:
    return triton.autotune(
        configs=configs,
        key=["N_CTX", "HEAD_DIM", "CAUSAL"],
        prune_configs_by={"early_config_prune": attention_configs_that_fit},
    )(attention_forward)


#: `attention_forward` autotuned, for q, k, v and out given as pointers (the kernel makes their descriptors).
attention_forward_kernel = _autotuned_attention(ATTENTION_CONFIGS)
#: `attention_forward` autotuned, for q, k, v and out given as `jt.TensorDescriptor` arguments.
attention_forward_host_descriptors_kernel = _autotuned_attention(ATTENTION_HOST_DESCRIPTOR_CONFIGS)


# -- paged decode attention: a page table and lengths read from memory, then a combine over the splits -----------------


@triton.jit
def paged_decode_partial_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    page_table_ptr,
    seq_lens_ptr,
    part_out_ptr,
    part_lse_ptr,
    sm_scale,
    page_table_stride,
    q_heads,
    cache_slot_stride,
    cache_head_stride,
    GROUP: tl.constexpr,
    BLOCK_H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLITS: tl.constexpr,
):
    # One program per (request, KV head, split): the GROUP query heads that share the KV head attend together to
    # the split's share of the request's tokens, found through its page table.
    request = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    lane = tl.arange(0, BLOCK_H)
    head_live = lane < GROUP
    heads = kv_head * GROUP + lane
    dims = tl.arange(0, HEAD_DIM)
    q_rows = request * q_heads + heads
    q = tl.load(q_ptr + q_rows[:, None] * HEAD_DIM + dims[None, :], mask=head_live[:, None], other=0.0)
    seq_len = tl.load(seq_lens_ptr + request)
    share = tl.cdiv(seq_len, SPLITS)
    lo = split * share
    hi = tl.minimum(lo + share, seq_len)
    run_max = tl.full([BLOCK_H], float("-inf"), tl.float32)
    run_sum = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        live = pos < hi
        page = tl.load(page_table_ptr + request * page_table_stride + pos // PAGE, mask=live, other=0)
        slot = page * PAGE + pos % PAGE
        cache_offsets = slot[:, None] * cache_slot_stride + kv_head * cache_head_stride + dims[None, :]
        k = tl.load(k_cache_ptr + cache_offsets, mask=live[:, None], other=0.0)
        scores = tl.dot(q, tl.trans(k)) * sm_scale
        scores = tl.where(live[None, :], scores, float("-inf"))
        new_max = tl.maximum(run_max, tl.max(scores, 1))
        weights = tl.exp(scores - new_max[:, None])
        shrink = tl.exp(run_max - new_max)
        v = tl.load(v_cache_ptr + cache_offsets, mask=live[:, None], other=0.0)
        acc = acc * shrink[:, None] + tl.dot(weights.to(v.dtype), v)
        run_sum = run_sum * shrink + tl.sum(weights, 1)
        run_max = new_max
    part_rows = q_rows * SPLITS + split
    part_ptrs = part_out_ptr + part_rows[:, None] * HEAD_DIM + dims[None, :]
    if hi > lo:
        tl.store(part_ptrs, acc / run_sum[:, None], mask=head_live[:, None])
        tl.store(part_lse_ptr + part_rows, run_max + tl.log(run_sum), mask=head_live)
    else:
        # A split past the request's end (a request shorter than SPLITS tokens) weighs nothing; the combine step
        # also skips it, by the same arithmetic.
        tl.store(part_ptrs, tl.zeros([BLOCK_H, HEAD_DIM], tl.float32), mask=head_live[:, None])
        tl.store(part_lse_ptr + part_rows, tl.full([BLOCK_H], float("-inf"), tl.float32), mask=head_live)


@triton.jit
def paged_decode_combine_kernel(
    part_out_ptr, part_lse_ptr, seq_lens_ptr, out_ptr, q_heads, HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr
):
    # One program per (request, query head): the splits' partial outputs weighed by their log-sum-exps, all splits
    # at once.
    request = tl.program_id(0)
    head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + request)
    splits = tl.arange(0, SPLITS)
    used = splits * tl.cdiv(seq_len, SPLITS) < seq_len
    row = request * q_heads + head
    lse = tl.load(part_lse_ptr + row * SPLITS + splits, mask=used, other=float("-inf"))
    dims = tl.arange(0, HEAD_DIM)
    parts = tl.load(
        part_out_ptr + (row * SPLITS + splits)[:, None] * HEAD_DIM + dims[None, :], mask=used[:, None], other=0.0
    )
    weights = tl.exp(lse - tl.max(lse, 0))
    out = tl.sum(weights[:, None] * parts, 0) / tl.sum(weights, 0)
    tl.store(out_ptr + row * HEAD_DIM + dims, out.to(out_ptr.dtype.element_ty))


# -- rotary embedding in place, positions offset by a per-sequence value read from memory ------------------------------


@triton.heuristics({"VARLEN": lambda args: args["cu_seqlens"] is not None})
@triton.jit
def rotary_in_place_kernel(
    x_ptr,
    cos_ptr,
    sin_ptr,
    positions_ptr,
    cu_seqlens,
    seqlen,
    n_heads,
    table_len,
    stride_batch,
    stride_token,
    stride_head,
    ROT_HALF: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_K: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    VARLEN: tl.constexpr,
):
    # One program per (token block, sequence), rotating every head of its tokens: the cos/sin rows are loaded
    # once and reused for all heads. x is read and written through the same pointers.
    tile = tl.program_id(0)
    seq = tl.program_id(1)
    if VARLEN:
        first = tl.load(cu_seqlens + seq)
        seqlen = tl.load(cu_seqlens + seq + 1) - first
        base = x_ptr + first * stride_token
    else:
        base = x_ptr + seq * stride_batch
    if tile * BLOCK_S >= seqlen:
        return
    tokens = tile * BLOCK_S + tl.arange(0, BLOCK_S)
    positions = tokens + tl.load(positions_ptr + seq)
    k = tl.arange(0, BLOCK_K)
    live = (tokens < seqlen)[:, None] & (k < ROT_HALF)[None, :]
    table_live = live & (positions < table_len)[:, None]
    table_offsets = positions[:, None] * ROT_HALF + k[None, :]
    cos = tl.load(cos_ptr + table_offsets, mask=table_live, other=1.0).to(tl.float32)
    sin = tl.load(sin_ptr + table_offsets, mask=table_live, other=0.0).to(tl.float32)
    if INTERLEAVED:
        # Pairs are neighbours: (x[2i], x[2i+1]).
        first_dim = 2 * k
        second_dim = 2 * k + 1
    else:
        # Pairs are the two halves: (x[i], x[i + ROT_HALF]).
        first_dim = k
        second_dim = k + ROT_HALF
    for head in range(n_heads):
        rows = base + tokens[:, None] * stride_token + head * stride_head
        a = tl.load(rows + first_dim[None, :], mask=live, other=0.0).to(tl.float32)
        b = tl.load(rows + second_dim[None, :], mask=live, other=0.0).to(tl.float32)
        tl.store(rows + first_dim[None, :], (a * cos - b * sin).to(x_ptr.dtype.element_ty), mask=live)
        tl.store(rows + second_dim[None, :], (a * sin + b * cos).to(x_ptr.dtype.element_ty), mask=live)


# -- cross entropy over a large vocabulary: two passes per row, the gradient written over the logits -------------------


@triton.jit
def vocab_cross_entropy_kernel(
    logits_ptr,
    labels_ptr,
    valid_count_ptr,
    loss_ptr,
    row_stride,
    vocab,
    ignore_index,
    SMOOTHING: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    # One program per row. The row is read twice in blocks of the vocabulary: once for its log-sum-exp (and its
    # sum, for label smoothing), once to overwrite it with the mean loss's gradient.
    row = tl.program_id(0).to(tl.int64)
    label = tl.load(labels_ptr + row)
    row_ptr = logits_ptr + row * row_stride
    cols = tl.arange(0, BLOCK_V)
    if label == ignore_index:
        for start in range(0, vocab, BLOCK_V):
            zeros = tl.zeros([BLOCK_V], logits_ptr.dtype.element_ty)
            tl.store(row_ptr + start + cols, zeros, mask=start + cols < vocab)
        tl.store(loss_ptr + row, 0.0)
        return
    n_valid = tl.load(valid_count_ptr).to(tl.float32)
    run_max = float("-inf")
    run_sum = 0.0
    logit_sum = 0.0
    for start in range(0, vocab, BLOCK_V):
        inside = start + cols < vocab
        x = tl.load(row_ptr + start + cols, mask=inside, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, tl.max(x, 0))
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(x - new_max), 0)
        logit_sum += tl.sum(tl.where(inside, x, 0.0), 0)
        run_max = new_max
    lse = run_max + tl.log(run_sum)
    target = tl.load(row_ptr + label).to(tl.float32)
    # With smoothing s the target distribution is (1 - s) on the label plus s / vocab everywhere.
    loss = (1.0 - SMOOTHING) * (lse - target) + SMOOTHING * (lse - logit_sum / vocab)
    tl.store(loss_ptr + row, loss / n_valid)
    for start in range(0, vocab, BLOCK_V):
        inside = start + cols < vocab
        x = tl.load(row_ptr + start + cols, mask=inside, other=0.0).to(tl.float32)
        grad = tl.exp(x - lse) - SMOOTHING / vocab
        grad = tl.where(start + cols == label, grad - (1.0 - SMOOTHING), grad) / n_valid
        tl.store(row_ptr + start + cols, grad.to(logits_ptr.dtype.element_ty), mask=inside)


# -- chunk-local cumulative sum over time, every head of a chunk in one program ----------------------------------------


@triton.autotune(configs=[triton.Config({}, num_warps=warps) for warps in (1, 2, 4, 8)], key=["BT", "H", "REVERSE"])
@triton.heuristics({"VARLEN": lambda args: args["cu_seqlens"] is not None})
@triton.jit(do_not_specialize=["T"])
def chunk_cumsum_kernel(
    g_ptr,
    out_ptr,
    cu_seqlens,
    chunk_table,
    T,
    scale,
    H: tl.constexpr,
    BH: tl.constexpr,
    BT: tl.constexpr,
    REVERSE: tl.constexpr,
    VARLEN: tl.constexpr,
):
    # g is [tokens, H] (a batch of equal sequences, or sequences packed end to end with their bounds in
    # cu_seqlens); each program sums one chunk of BT steps of one sequence, forwards or backwards.
    chunk = tl.program_id(0)
    seq = tl.program_id(1)
    if VARLEN:
        # Which sequence and which of its chunks this program takes come from a table built on the host.
        seq = tl.load(chunk_table + 2 * chunk)
        chunk = tl.load(chunk_table + 2 * chunk + 1)
        bos = tl.load(cu_seqlens + seq)
        eos = tl.load(cu_seqlens + seq + 1)
    else:
        bos = seq * T
        eos = bos + T
    steps = bos + chunk * BT + tl.arange(0, BT)
    heads = tl.arange(0, BH)
    live = (steps < eos)[:, None] & (heads < H)[None, :]
    offsets = steps[:, None] * H + heads[None, :]
    g = tl.load(g_ptr + offsets, mask=live, other=0.0).to(tl.float32)
    out = tl.cumsum(g, axis=0, reverse=REVERSE)
    if scale is not None:
        out = out * scale
    tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=live)


# -- an autotuned matrix product: grouped program order, even-K and split-K variants -----------------------------------


def matmul_configs_that_fit(configs: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
    """The matmul configs whose blocks fit the problem: no tile wider than the matrix it covers (rounded to a power
    of two), no K step longer than K; the first config when none fits."""
    m, n, k = kwargs["M"], kwargs["N"], kwargs["K"]
    kept = [
        c
        for c in configs
        if c.kwargs["BLOCK_M"] <= triton.next_power_of_2(m)
        and c.kwargs["BLOCK_N"] <= triton.next_power_of_2(n)
        and c.kwargs["BLOCK_K"] * c.kwargs["SPLIT_K"] <= k
    ]
    return kept or configs[:1]


MATMUL_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split}, num_warps=warps, num_stages=stages)
    for bm, bn, bk, split, warps, stages in (
        (128, 256, 64, 1, 8, 3),
        (256, 128, 64, 1, 8, 3),
        (128, 128, 64, 1, 8, 4),
        (128, 128, 32, 1, 4, 4),
        (64, 256, 32, 1, 4, 4),
        (256, 64, 32, 1, 4, 4),
        (128, 64, 32, 1, 4, 4),
        (64, 128, 32, 1, 4, 4),
        (64, 64, 64, 1, 4, 3),
        (64, 64, 32, 1, 2, 5),
        (32, 64, 32, 1, 2, 5),
        (128, 128, 64, 2, 8, 3),
        (64, 64, 64, 4, 4, 3),
    )
]


@triton.autotune(
    configs=MATMUL_CONFIGS,
    key=["M", "N", "K"],
    prune_configs_by={"early_config_prune": matmul_configs_that_fit},
    reset_to_zero=["c_ptr"],
)
@triton.heuristics({"EVEN_K": lambda args: args["K"] % (args["BLOCK_K"] * args["SPLIT_K"]) == 0})
@triton.jit
def grouped_matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    GROUP_M: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    # Program ids walk the tiles GROUP_M rows of tiles at a time (neighbouring programs share rows of A); axis 1
    # splits K, each split adding its share into C.
    pid = tl.program_id(0)
    split = tl.program_id(1)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    group_first = (pid // per_group) * GROUP_M
    group_rows = min(tiles_m - group_first, GROUP_M)
    tile_m = group_first + (pid % per_group) % group_rows
    tile_n = (pid % per_group) // group_rows
    rows = tl.max_contiguous(tl.multiple_of((tile_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M, BLOCK_M), BLOCK_M)
    cols = tl.max_contiguous(tl.multiple_of((tile_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N, BLOCK_N), BLOCK_N)
    ks = split * BLOCK_K + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K * SPLIT_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            left = K - step * BLOCK_K * SPLIT_K
            a = tl.load(a_ptrs, mask=ks[None, :] < left, other=0.0)
            b = tl.load(b_ptrs, mask=ks[:, None] < left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * SPLIT_K * stride_ak
        b_ptrs += BLOCK_K * SPLIT_K * stride_bk
    out_rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + out_rows[:, None] * stride_cm + out_cols[None, :] * stride_cn
    inside = (out_rows < M)[:, None] & (out_cols < N)[None, :]
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=inside)
    else:
        tl.atomic_add(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=inside)


# -- a state-space decode step: the state cache updated in place at slots read from memory -----------------------------


@triton.heuristics({"BLOCK_STATE": lambda args: triton.next_power_of_2(args["dstate"])})
@triton.jit
def ssm_decode_step_kernel(
    state_ptr,
    x_ptr,
    dt_ptr,
    dt_bias_ptr,
    a_ptr,
    b_ptr,
    c_ptr,
    d_ptr,
    z_ptr,
    slots_ptr,
    out_ptr,
    headdim,
    dstate,
    n_heads,
    n_groups,
    heads_per_group,
    state_slot_stride,
    state_head_stride,
    BLOCK_M: tl.constexpr,
    BLOCK_STATE: tl.constexpr,
    DT_SOFTPLUS: tl.constexpr,
):
    # One program per (block of head dims, sequence, head): one step of h <- exp(A dt) h + dt B x, y = C h + D x,
    # gated by silu(z). The sequence's state lives in the cache row its slot names.
    dim_block = tl.program_id(0)
    seq = tl.program_id(1)
    head = tl.program_id(2)
    slot = tl.load(slots_ptr + seq)
    group = head // heads_per_group
    dims = dim_block * BLOCK_M + tl.arange(0, BLOCK_M)
    states = tl.arange(0, BLOCK_STATE)
    dim_live = dims < headdim
    state_live = states < dstate
    both = dim_live[:, None] & state_live[None, :]
    h_ptrs = state_ptr + slot * state_slot_stride + head * state_head_stride + dims[:, None] * dstate + states[None, :]
    h = tl.load(h_ptrs, mask=both, other=0.0)
    token = (seq * n_heads + head) * headdim + dims
    x = tl.load(x_ptr + token, mask=dim_live, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + token, mask=dim_live, other=0.0).to(tl.float32)
    dt = tl.load(dt_ptr + seq * n_heads + head).to(tl.float32) + tl.load(dt_bias_ptr + head)
    if DT_SOFTPLUS:
        dt = tl.where(dt <= 20.0, tl.log(1.0 + tl.exp(dt)), dt)
    decay = tl.exp(tl.load(a_ptr + head) * dt)
    bc_offsets = (seq * n_groups + group) * dstate + states
    b = tl.load(b_ptr + bc_offsets, mask=state_live, other=0.0).to(tl.float32)
    c = tl.load(c_ptr + bc_offsets, mask=state_live, other=0.0).to(tl.float32)
    h = h * decay + (b * dt)[None, :] * x[:, None]
    tl.store(h_ptrs, h, mask=both)
    y = tl.sum(h * c[None, :], 1) + tl.load(d_ptr + head) * x
    y = y * z * tl.sigmoid(z)
    tl.store(out_ptr + token, y.to(out_ptr.dtype.element_ty), mask=dim_live)
