"""Prints the PyTorch reference numbers pasted into tests/optim/*.cpp.

Run with a PyTorch (Debian's python3-torch 1.13 was used):  python3 tests/optim/torch_reference.py
Every case sets .grad by hand to a fixed sequence and calls step(), exactly like the C++ tests.
"""
import math

import torch

torch.set_printoptions(precision=17)


def run(make_opt, p0, grads, dtype):
    p = torch.tensor(p0, dtype=dtype, requires_grad=True)
    opt = make_opt([p])
    out = []
    for g in grads:
        p.grad = torch.tensor(g, dtype=dtype)
        opt.step()
        out.append(p.detach().flatten().tolist())
    return out


def show(name, rows):
    print(name)
    for r in rows:
        print("  {" + ", ".join(repr(x) for x in r) + "},")


# ---- scalar cases, float64: p0 = 1, grads 1, 2, -1, lr 0.1 ---------------------------------------
scalar = dict(p0=[1.0], grads=[[1.0], [2.0], [-1.0]], dtype=torch.float64)
S = torch.optim.SGD
show("sgd plain", run(lambda ps: S(ps, lr=0.1), **scalar))
show("sgd momentum 0.9", run(lambda ps: S(ps, lr=0.1, momentum=0.9), **scalar))
show("sgd momentum 0.9 dampening 0.5", run(lambda ps: S(ps, lr=0.1, momentum=0.9, dampening=0.5), **scalar))
show("sgd nesterov 0.9", run(lambda ps: S(ps, lr=0.1, momentum=0.9, nesterov=True), **scalar))
show("sgd weight_decay 0.1", run(lambda ps: S(ps, lr=0.1, weight_decay=0.1), **scalar))
show("adam lr 0.1", run(lambda ps: torch.optim.Adam(ps, lr=0.1), **scalar))
show("adam lr 0.1 weight_decay 0.1", run(lambda ps: torch.optim.Adam(ps, lr=0.1, weight_decay=0.1), **scalar))
show("adamw lr 0.1 weight_decay 0.1", run(lambda ps: torch.optim.AdamW(ps, lr=0.1, weight_decay=0.1), **scalar))

# ---- a 2x2 float32 parameter with everything switched on ------------------------------------------
matrix = dict(p0=[[0.5, -1.5], [2.0, 0.25]],
              grads=[[[0.1, -0.2], [0.3, 0.4]], [[-0.5, 0.25], [0.0, 1.0]], [[0.2, 0.2], [-0.3, -0.1]]],
              dtype=torch.float32)
show("sgd 2x2 f32 lr .05 momentum .9 dampening .1 wd .01",
     run(lambda ps: S(ps, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01), **matrix))
show("sgd 2x2 f32 lr .05 nesterov .8 wd .05",
     run(lambda ps: S(ps, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.05), **matrix))
show("adam 2x2 f32 lr .01 betas (.8, .9) eps 1e-6 wd .1 amsgrad",
     run(lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1, amsgrad=True),
         **matrix))
show("adamw 2x2 f32 lr .01 wd .1 amsgrad",
     run(lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, amsgrad=True), **matrix))

# ---- clip_grad_norm_ -----------------------------------------------------------------------------
for norm_type, max_norm in [(2.0, 1.0), (1.0, 1.0), (3.0, 100.0), (math.inf, 0.5)]:
    a = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    a.grad = torch.tensor([[3.0, -4.0], [1.0, 0.5]], dtype=torch.float64)
    b.grad = torch.tensor([-2.0, 0.0, 1.5], dtype=torch.float64)
    total = torch.nn.utils.clip_grad_norm_([a, b], max_norm, norm_type)
    print(f"clip norm_type {norm_type} max_norm {max_norm}: total {total.item()!r}")
    show("  grads after", [a.grad.flatten().tolist() + b.grad.tolist()])


# ---- schedulers: lr for epochs 0..11 (base lr 0.1) -------------------------------------------------
def lrs(make_sched, epochs=12):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1)
    sched = make_sched(opt)
    out = [opt.param_groups[0]["lr"]]
    for _ in range(epochs - 1):
        opt.step()
        sched.step()
        out.append(opt.param_groups[0]["lr"])
    return out


L = torch.optim.lr_scheduler
show("StepLR step_size 3 gamma 0.5", [lrs(lambda o: L.StepLR(o, step_size=3, gamma=0.5))])
show("CosineAnnealingLR T_max 10 eta_min 0.001", [lrs(lambda o: L.CosineAnnealingLR(o, T_max=10, eta_min=0.001))])
show("LinearLR start 0.25 end 1 total 4", [lrs(lambda o: L.LinearLR(o, start_factor=0.25, total_iters=4))])
show("SequentialLR LinearLR(0.1, total 3) then CosineAnnealingLR(T_max 8), milestone 3",
     [lrs(lambda o: L.SequentialLR(o, [L.LinearLR(o, start_factor=0.1, total_iters=3),
                                       L.CosineAnnealingLR(o, T_max=8)], milestones=[3]))])
