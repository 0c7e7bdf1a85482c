"""A small CPU training job for tests/python/pytorch and bench/torch_step.py: a CNN, SGD,
a DataLoader over an in-memory dataset, `steps` steps.

    python train_job.py plain [STEPS]             train
    python train_job.py profile OUT.json [STEPS]  train under torch.profiler.profile() and
                                                  write {op name: count} of what it reports
"""
import json
import sys


def main(steps=20):
    # everything after `import torch` runs here, so that a profiler around main() sees
    # every op a recording of the whole program sees
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(4 * 7 * 7, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = TensorDataset(torch.randn(steps * 8, 1, 16, 16), torch.randint(0, 10, (steps * 8,)))
    loader = DataLoader(data, batch_size=8)
    for x, y in loader:
        train_step(model, opt, x, y)


def train_step(model, opt, x, y):
    import torch.nn.functional as F
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "plain":
        import torch  # noqa: F401 - imported first, as a training script does
        main(int(sys.argv[2]) if len(sys.argv) > 2 else 20)
    elif mode == "profile":
        import torch
        with torch.profiler.profile() as prof:
            main(int(sys.argv[3]) if len(sys.argv) > 3 else 20)
        counts = {}
        for event in prof.events():
            counts[event.name] = counts.get(event.name, 0) + 1
        with open(sys.argv[2], "w") as f:
            json.dump(counts, f)
    else:
        sys.exit("train_job.py: unknown mode %r" % mode)
