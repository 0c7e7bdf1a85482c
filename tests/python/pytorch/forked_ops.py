"""Ops on torch's inter-op pool: torch.jit.fork inside TorchScript runs the forked function
on a PTThreadPool thread that never ran Python (at::launch)."""
import torch

torch.set_num_interop_threads(2)


def branch(a):
    return torch.mm(a, a).relu()


@torch.jit.script
def both(a):
    fut = torch.jit.fork(branch, a)
    b = torch.add(a, a)
    return torch.jit.wait(fut) + b


def main():
    x = torch.randn(64, 64)
    for _ in range(10):
        both(x)


main()
