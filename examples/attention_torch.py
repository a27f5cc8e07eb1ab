# The bf16 attention kernels as one differentiable torch function, built from phobos.torch_op.
#
#   python examples/attention_torch.py [--size B H HKV L S D] [--mode gpu|interpret|emulate]
#
#   attention = differentiable_attention()            # once per process (torch keeps the ops)
#   o = attention(q, k, v, is_causal=True)            # as F.scaled_dot_product_attention(..., enable_gqa=True)
#   o.sum().backward()                                # q.grad, k.grad, v.grad by the backward kernels
#
# Each kernel (attention_lse of attention_bf16.phobos; delta, dK/dV and dQ of
# attention_bf16_backward.phobos) is registered with `phobos.torch_op`, which declares the tensors it
# writes; one more custom op, "<namespace>::attention", allocates O and the log-sum-exp and runs the
# forward op, and `register_autograd` gives it the backward: delta, then dK/dV, then dQ on the saved
# Q, K, V, O and log-sum-exp.  Every op has a fake implementation, so torch.compile traces the
# forward and the backward.  bf16 tensors [B, H, L, D] (Q) and [B, HKV, S, D] (K, V): on the GPU, or
# on the CPU through the interpreter or the emulator.  The script checks O and the gradients against
# torch's scaled_dot_product_attention in float64 (autograd) on the same bf16 inputs.
from __future__ import annotations

import math
from pathlib import Path

import phobos
from example_support import arguments, pick_mode, run

HERE = Path(__file__).parent
GPU_SIZE = (2, 8, 2, 1024 + 7, 1024 + 7, 128)  # B, H, HKV, L, S, D
CPU_SIZE = (1, 2, 1, 40, 50, 64)


def differentiable_attention(mode: str | None = None, namespace: str = "phobos_attention"):
    """attention(q, k, v, is_causal=False, scale=None) -> O, differentiable in q, k and v; the ops are
    registered as "<namespace>::<kernel>" (torch refuses a name registered twice in one process)."""
    import torch

    forward = phobos.load(HERE / "attention_bf16.phobos", mode=mode)
    backward = phobos.load(HERE / "attention_bf16_backward.phobos", mode=mode)
    attention_lse = phobos.torch_op(forward.attention_lse, name=f"{namespace}::attention_lse")
    delta_op, dkdv_op, dq_op = (phobos.torch_op(getattr(backward, name), name=f"{namespace}::{name}")
                                for name in ("attention_backward_delta", "attention_backward_dkdv",
                                             "attention_backward_dq"))

    def outputs(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)

    @torch.library.custom_op(f"{namespace}::attention", mutates_args=(),
                             schema="(Tensor q, Tensor k, Tensor v, float scale, bool causal) -> (Tensor, Tensor)")
    def attention_op(q, k, v, scale, causal):
        o, lse = outputs(q)
        attention_lse(q, k, v, o, lse, scale, causal)
        return o, lse

    @attention_op.register_fake
    def _(q, k, v, scale, causal):
        return outputs(q)

    def setup_context(ctx, inputs, output) -> None:
        q, k, v, ctx.scale, ctx.causal = inputs
        ctx.save_for_backward(q, k, v, *output)
        ctx.mark_non_differentiable(output[1])

    def gradients(ctx, do, _):
        q, k, v, o, lse = ctx.saved_tensors
        do = do.contiguous()
        delta = torch.empty_like(lse)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        delta_op(o, do, delta)
        dkdv_op(q, k, v, do, lse, delta, dk, dv, ctx.scale, ctx.causal)
        dq_op(q, k, v, do, lse, delta, dq, ctx.scale, ctx.causal)
        return dq, dk, dv, None, None

    attention_op.register_autograd(gradients, setup_context=setup_context)

    def attention(q, k, v, is_causal: bool = False, scale: float | None = None):
        """softmax(q k^T * scale [causal]) v for bf16 q [B, H, L, D], k and v [B, HKV, S, D] (HKV divides H),
        as torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale,
        enable_gqa=True) computes it; scale defaults to 1 / sqrt(D)."""
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        return attention_op(q.contiguous(), k.contiguous(), v.contiguous(), scale, is_causal)[0]

    return attention


def sdpa_reference(q, k, v, do, causal: bool):
    """O and the gradients of <O, dO> by torch's SDPA in float64 on the same (bf16) values."""
    import torch
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    o = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=True)
    o.backward(do.double())
    return o.detach(), *(x.grad for x in leaves)


def main() -> int:
    import torch
    args = arguments("the bf16 attention kernels as a differentiable torch function, checked against torch's "
                     "SDPA in float64", size={"type": int, "nargs": 6, "metavar": ("B", "H", "HKV", "L", "S", "D")})
    mode = pick_mode(args.mode)
    batch, heads, kv_heads, length, keys, head = args.size or (GPU_SIZE if mode == "gpu" else CPU_SIZE)
    device = "cuda" if mode == "gpu" else "cpu"
    attention = differentiable_attention(mode)
    ok = True
    for causal in (True, False):
        q = torch.randn(batch, heads, length, head, device=device).to(torch.bfloat16).requires_grad_()
        k, v = (torch.randn(batch, kv_heads, keys, head, device=device).to(torch.bfloat16).requires_grad_()
                for _ in range(2))
        do = torch.randn(batch, heads, length, head, device=device).to(torch.bfloat16)
        o = attention(q, k, v, is_causal=causal)
        o.backward(do)
        print(f"B, H, HKV, L, S, D = {batch}, {heads}, {kv_heads}, {length}, {keys}, {head}, causal = {causal}, "
              f"mode = {mode}")
        for name, got, want in zip(("O", "dQ", "dK", "dV"), (o, q.grad, k.grad, v.grad),
                                   sdpa_reference(q, k, v, do, causal)):
            error = (got.double() - want).abs().max().item() / max(want.abs().max().item(), 1e-30)
            ok &= error <= 2 ** -6
            print(f"  {name}: max |error| / max |SDPA| = {error:.3g}: {'ok' if error <= 2 ** -6 else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    run(main)
