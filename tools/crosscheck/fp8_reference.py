#!/usr/bin/python3
"""torch_reference.py's trainer with the transformer layers' linear layers in FP8, for --fp8-format.

Every matrix product of a transformer layer's linear layer (GPT-2's Conv1D, Llama's projections;
not the LM head) reads its two operands quantised as Transformer Engine's recipe says and
multiplies them in fp32, in the forward pass and in both products of its backward pass; attention's
products, norms, softmax, the loss, the gradients and AdamW stay fp32. An operand x is quantised as
fp8(x * s) * (1 / s), s per block from the block's amax:
  tensorwise: one block, s = largest / amax (fp32);
  blockwise:  1x128 blocks along the product's contraction (128x128 tiles for weights), s =
              largest / amax rounded down to a power of two;
  mxfp8:      1x32 blocks along the contraction, 1 / s the power of two at or above amax / largest.
An amax of 0 gives s = 1. --fp8-format hybrid quantises the gradients to E5M2, everything else to
E4M3. fp8() rounds to the nearest value of the OCP 8-bit floating point grid (E4M3: bias 7, no
infinity, largest 448; E5M2: bias 15, largest 57344), ties to the even code, saturating at the
largest: the grid is built here from the OCP specification's formula. Written from those rules,
not from tessel's code.
"""
import torch
import torch.nn as nn

import torch_reference as ref


def ocp_grid(exponent_bits, mantissa_bits, bias, e4m3):
    """The finite non-negative values of an OCP FP8 format, ascending (the codes 0, 1, ... in order)."""
    values = []
    for exponent in range(2 ** exponent_bits):
        for mantissa in range(2 ** mantissa_bits):
            if e4m3 and exponent == 2 ** exponent_bits - 1 and mantissa == 2 ** mantissa_bits - 1:
                continue  # S.1111.111: NaN
            if not e4m3 and exponent == 2 ** exponent_bits - 1:
                continue  # infinities and NaNs
            if exponent == 0:
                values.append(mantissa * 2.0 ** (1 - bias - mantissa_bits))
            else:
                values.append((1 + mantissa / 2 ** mantissa_bits) * 2.0 ** (exponent - bias))
    return torch.tensor(values, dtype=torch.float64)


GRIDS = {"e4m3": ocp_grid(4, 3, 7, True), "e5m2": ocp_grid(5, 2, 15, False)}


def to_grid(x, fmt):
    """x (fp32) rounded to the grid: nearest, ties to the even code, past the largest to it."""
    grid = GRIDS[fmt]
    a = x.double().abs().clamp(max=grid[-1].item())
    above = torch.bucketize(a.contiguous(), grid).clamp(max=len(grid) - 1)  # the first value at or above a
    below = (above - 1).clamp(min=0)
    up, down = grid[above] - a, a - grid[below]
    take_above = (up < down) | ((up == down) & (above % 2 == 0))
    return (torch.where(take_above, grid[above], grid[below]) * torch.sign(x.double())).float()


def scales(amax, fmt, recipe):
    """s for each block's amax (fp32)."""
    largest = torch.tensor(GRIDS[fmt][-1].item(), dtype=torch.float32)
    ok = amax > 0
    safe = torch.where(ok, amax, torch.ones_like(amax))
    if recipe == "mxfp8":
        mantissa, exponent = torch.frexp(safe / largest)
        up = torch.where(mantissa == 0.5, exponent - 1, exponent)  # log2 rounded up
        s = torch.ldexp(torch.ones_like(safe), -up)
    else:
        s = largest / safe
        if recipe == "blockwise":
            _, exponent = torch.frexp(s)
            s = torch.ldexp(torch.ones_like(s), exponent - 1)
    return torch.where(ok, s, torch.ones_like(s))


def quantise(x, fmt, recipe, weight, axis):
    """x (2-D) quantised by the recipe, its 1-D blocks along `axis` (the product's contraction)."""
    rows, cols = x.shape
    if recipe == "tensorwise":
        block = (rows, cols)
    elif recipe == "blockwise" and weight:
        block = (128, 128)
    else:
        length = 32 if recipe == "mxfp8" else 128
        block = (length, 1) if axis == 0 else (1, length)
    br, bc = min(block[0], rows), min(block[1], cols)
    pr, pc = -rows % br, -cols % bc  # zeros padding the last blocks change no amax
    padded = torch.nn.functional.pad(x, (0, pc, 0, pr))
    tiles = padded.view((rows + pr) // br, br, (cols + pc) // bc, bc)
    s = scales(tiles.abs().amax(dim=(1, 3), keepdim=True), fmt, recipe)
    out = to_grid(tiles * s, fmt) * (1.0 / s)
    return out.view(rows + pr, cols + pc)[:rows, :cols]


class Fp8Product(torch.autograd.Function):
    """a @ b (2-D) with a an activation and b a weight, each quantised along the contraction; its
    backward quantises g (a gradient) and the operands again for each product's contraction."""

    @staticmethod
    def forward(ctx, a, b, recipe, hybrid):
        ctx.save_for_backward(a, b)
        ctx.recipe, ctx.grad_format = recipe, "e5m2" if hybrid else "e4m3"
        return quantise(a, "e4m3", recipe, False, 1) @ quantise(b, "e4m3", recipe, True, 0)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        r, gf = ctx.recipe, ctx.grad_format
        da = quantise(g, gf, r, False, 1) @ quantise(b, "e4m3", r, True, 1).t()
        db = quantise(a, "e4m3", r, False, 0).t() @ quantise(g, gf, r, False, 0)
        return da, db, None, None


FP8 = {"recipe": None, "hybrid": False}


def product(x, w):
    out = Fp8Product.apply(x.reshape(-1, x.shape[-1]), w, FP8["recipe"], FP8["hybrid"])
    return out.view(*x.shape[:-1], -1)


def conv1d_forward(self, x):
    return product(x, self.weight) + self.bias  # the bias added in fp32, after the product


plain_linear_forward = nn.Linear.forward


def linear_forward(self, x):
    if getattr(self, "lm_head", False):  # the LM head stays out of FP8
        return plain_linear_forward(self, x)
    out = product(x, self.weight.t())
    return out + self.bias if self.bias is not None else out


ref.Conv1D.forward = conv1d_forward
nn.Linear.forward = linear_forward


def main():
    p = ref.make_parser(__doc__.split("\n")[0])
    p.add_argument("--fp8-format", choices=["e4m3", "hybrid"], required=True)
    p.add_argument("--fp8-recipe", choices=["tensorwise", "blockwise", "mxfp8"], required=True)
    args = ref.parse_args(parser=p)
    FP8["recipe"], FP8["hybrid"] = args.fp8_recipe, args.fp8_format == "hybrid"
    cfg, model = ref.load_model_folder(args.model)
    if hasattr(model, "lm_head"):
        model.lm_head.lm_head = True
    ref.train(args, cfg, model)


if __name__ == "__main__":
    main()
