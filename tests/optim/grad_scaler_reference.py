"""Prints the PyTorch reference numbers pasted into tests/optim/test_grad_scaler.cpp.

Run with a PyTorch (Debian's python3-torch 1.13 was used):
    python3 tests/optim/grad_scaler_reference.py

PyTorch 1.13 has GradScaler for CUDA only (torch.cuda.amp.GradScaler; a CPU one came in 2.3), and
its two kernels, _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_, have no CPU
implementation there. So this script runs torch.cuda.amp.GradScaler's own Python code (the stages
unscale -> step -> update, the skip, the combination of found-inf flags, state_dict) on CPU tensors,
with the two kernels transcribed from their CUDA source (aten/src/ATen/native/cuda/AmpKernels.cu,
v1.13.0) below. The rule itself is the transcription's; the C++ test checks the sequence it gives.

Each case: one float32 parameter of two elements, SGD lr 0.1. Per step the gradient is set to
g_t * scale (what backward of scale(loss) gives), one element replaced by inf or NaN where the
script says so ("ok" steps can still overflow: g_t * scale is rounded to float32); then
scaler.step(opt) and scaler.update(). A row: kind, scale and _growth_tracker after update(),
whether the parameter changed, the parameter.
"""
import math

import torch
import torch.cuda.amp.grad_scaler as gs


def non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    # AmpKernels.cu: found_inf = 1 if any element is not finite (tested before the multiply);
    # every element is multiplied by inv_scale (skipped when inv_scale == 1).
    for g in grads:
        if not torch.isfinite(g).all():
            found_inf.fill_(1.0)
        if inv_scale.item() != 1.0:
            g.mul_(inv_scale)


def update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    # AmpKernels.cu, amp_update_scale_cuda_kernel: float scale times double factor, rounded to float.
    s = scale.item()
    if found_inf.item():
        scale.fill_(torch.tensor(s * backoff_factor, dtype=torch.float32).item())
        growth_tracker.fill_(0)
    else:
        successful = growth_tracker.item() + 1
        if successful == growth_interval:
            grown = torch.tensor(s * growth_factor, dtype=torch.float64).to(torch.float32).item()
            if math.isfinite(grown):
                scale.fill_(grown)
            growth_tracker.fill_(0)
        else:
            growth_tracker.fill_(successful)
    return scale


torch._amp_foreach_non_finite_check_and_unscale_ = non_finite_check_and_unscale_
torch._amp_update_scale_ = update_scale_
gs.amp_definitely_not_available = lambda: False  # or the constructor disables itself without CUDA


class CpuReplicator(gs._MultiDeviceReplicator):
    def __init__(self, master_tensor):  # the original asserts a CUDA (or XLA) tensor; nothing else
        self.master = master_tensor
        self._per_device_tensors = {}


gs._MultiDeviceReplicator = CpuReplicator


def run(name, steps, **options):
    scaler = gs.GradScaler(**options)
    scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))  # what scale() does first (CUDA-only here)
    p = torch.tensor([1.0, -2.0], requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1)
    print(name)
    for t, kind in enumerate(steps):
        g = torch.tensor([0.5 + t, -0.25 * t], dtype=torch.float32)
        scaled = g * scaler._scale
        if kind == "inf":
            scaled[1] = float("inf")
        elif kind == "nan":
            scaled[0] = float("nan")
        p.grad = scaled
        before = p.detach().clone()
        scaler.step(opt)
        stepped = not torch.equal(before, p.detach())
        scaler.update()
        sd = scaler.state_dict()
        print("  {%s, %s, %d, %s, %s}," % ('"' + kind + '"', repr(sd["scale"]), sd["_growth_tracker"],
                                           "true" if stepped else "false",
                                           "{" + ", ".join(repr(x) for x in p.detach().tolist()) + "}"))
    print("  state_dict:", scaler.state_dict())


run("growth_interval 3", ["ok", "ok", "ok", "inf", "ok", "nan", "ok", "ok", "ok", "ok", "ok", "ok", "inf",
                          "inf", "ok"], growth_interval=3)
run("odd factors", ["ok", "ok", "inf", "ok", "ok", "ok", "nan", "ok"], init_scale=1000.3, growth_factor=3.0,
    backoff_factor=0.3, growth_interval=2)
run("growth stops below float32's overflow", ["ok", "ok", "ok", "inf", "ok"], init_scale=2.0 ** 126,
    growth_interval=1)
