#!/usr/bin/python3
"""torch_reference.py's trainer in fp16 mixed precision with dynamic loss scaling, for --fp16.

Every matrix product of a linear layer (GPT-2's Conv1D, nn.Linear, the LM heads) reads its two
operands rounded to IEEE fp16 by PyTorch's own conversion (tensor.half(): to nearest even, past
65504 to inf, subnormals kept) and multiplies them in fp32, in the forward pass and in both
products of its backward pass; attention's products, norms, softmax, the loss, the gradients and
AdamW stay fp32, as they do in tessel. The loss is multiplied by the loss scale before backward,
the gradients by its inverse after; an iteration whose gradients hold inf or NaN takes no step
(and the learning-rate schedule does not advance), and the scale follows Megatron-LM's
DynamicGradScaler (megatron/core/optimizer/grad_scaler.py): backoff 0.5 once the hysteresis
runs out, growth 2 after a window of clean iterations. Written from those rules, not from
tessel's code. Each log record adds "loss_scale" (after the iteration's update) and "skipped".
"""
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_reference as ref


def fp16(x):
    """x as fp16 rounds it, back in fp32 (every fp16 value is an fp32 value)."""
    return x.half().float()


class Fp16Product(torch.autograd.Function):
    """a @ b (2-D) over operands rounded to fp16; its backward rounds the operands of its two
    products the same way: da = r(g) @ r(b)ᵀ, db = r(a)ᵀ @ r(g)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return fp16(a) @ fp16(b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        g16 = fp16(g)
        return g16 @ fp16(b).t(), fp16(a).t() @ g16


def product(x, w):
    """x (..., K) @ w (K, N) through Fp16Product."""
    out = Fp16Product.apply(x.reshape(-1, x.shape[-1]), w)
    return out.view(*x.shape[:-1], -1)


def conv1d_forward(self, x):
    return product(x, self.weight) + self.bias  # the bias added in fp32, after the product


def linear_forward(self, x):
    out = product(x, self.weight.t())
    return out + self.bias if self.bias is not None else out


def gpt2_forward(self, tokens):
    t = self.transformer
    positions = torch.arange(tokens.shape[1], device=tokens.device)
    x = t.wte(tokens) + t.wpe(positions)
    for block in t.h:
        x = block(x)
    return product(t.ln_f(x), t.wte.weight.t())  # the tied LM head


ref.Conv1D.forward = conv1d_forward
nn.Linear.forward = linear_forward
ref.GPT2LMHead.forward = gpt2_forward


class DynamicLossScale:
    """grad_scaler.py's DynamicGradScaler: the scale in fp32, its two trackers."""

    def __init__(self, initial, minimum, window, hysteresis):
        self.scale = torch.tensor(initial, dtype=torch.float32)
        self.minimum = torch.tensor(minimum, dtype=torch.float32)
        self.window, self.hysteresis = window, hysteresis
        self.growth_tracker, self.hysteresis_tracker = 0, hysteresis

    def inverse(self):
        return self.scale.double().reciprocal().float()

    def update(self, found_inf):
        if found_inf:
            self.growth_tracker = 0
            self.hysteresis_tracker -= 1
            if self.hysteresis_tracker <= 0:
                self.scale = torch.maximum(self.scale * 0.5, self.minimum)
        else:
            self.growth_tracker += 1
            if self.growth_tracker == self.window:
                self.growth_tracker = 0
                self.hysteresis_tracker = self.hysteresis
                self.scale = self.scale * 2.0


def train_step(model, optimizer, inputs, targets, args, scaler):
    """One iteration: (loss, grad norm or None, skipped)."""
    G, S = inputs.shape
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for start in range(0, G, args.micro_batch_size):
        logits = model(inputs[start:start + args.micro_batch_size])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               targets[start:start + args.micro_batch_size].reshape(-1),
                               reduction="sum") / (G * S)
        (loss * scaler.scale).backward()
        loss_sum += loss.item()
    params = [p for p in model.parameters() if p.grad is not None]
    found_inf = False
    for p in params:
        found_inf = found_inf or not bool(torch.isfinite(p.grad).all())
        p.grad.mul_(scaler.inverse())
    scaler.update(found_inf)
    if found_inf:
        return loss_sum, None, True
    grad_norm = torch.nn.utils.clip_grad_norm_(params, args.clip_grad).item() if args.clip_grad > 0 else \
        torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params])).item()
    optimizer.step()
    return loss_sum, grad_norm, False


def main():
    p = ref.make_parser(__doc__.split("\n")[0])
    p.add_argument("--initial-loss-scale", type=float, default=2.0 ** 32)
    p.add_argument("--min-loss-scale", type=float, default=1.0)
    p.add_argument("--loss-scale-window", type=float, default=1000)
    p.add_argument("--hysteresis", type=int, default=2)
    args = ref.parse_args(parser=p)
    cfg, model = ref.load_model_folder(args.model)
    torch.set_num_threads(args.threads)
    samples = ref.check_samples(args, cfg)
    optimizer = ref.make_adamw(model, args)
    scaler = DynamicLossScale(args.initial_loss_scale, args.min_loss_scale, args.loss_scale_window,
                              args.hysteresis)
    steps = 0  # successful ones: a skipped iteration does not advance the schedule
    with open(args.log_json, "w") if args.log_json else open("/dev/null", "w") as log:
        for i in range(args.train_iters):
            lr = ref.learning_rate(steps, args)
            for group in optimizer.param_groups:
                group["lr"] = lr
            inputs, targets = ref.batch(samples, i, args.global_batch_size)
            start = time.perf_counter()
            loss, grad_norm, skipped = train_step(model, optimizer, inputs, targets, args, scaler)
            steps += 0 if skipped else 1
            record = {"iteration": i + 1, "loss": loss, "grad_norm": grad_norm, "lr": lr,
                      "loss_scale": scaler.scale.item(), "skipped": skipped,
                      "step_ms": (time.perf_counter() - start) * 1e3}
            print(f"iteration {i + 1:5d} | loss {loss:.6f} | loss scale {scaler.scale.item():.1f} | "
                  f"grad norm {grad_norm if grad_norm is not None else math.nan:.6f} | lr {lr:.3e}"
                  + (" | skipped" if skipped else ""))
            log.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
