"""The training job of tests/python/torch_test.py: a small CNN trained with synchronous SGD
(momentum 0.9) on a fixed synthetic data set, each of the two workers on its half of every
combined batch.

Usage: python3 torch_job.py MODE OUT_DIR
  MODE  hook       tally.torch.DistributedDataParallel (the DDP hook), under tools/launch.py
        optimizer  tally.torch.DistributedOptimizer without DDP, under tools/launch.py
        gloo       torch's own DDP over gloo (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set)
        single     one process on the combined batches, no job (the reference)
Writes OUT_DIR/MODE-RANK.pt: {"losses": [per step: the loss of each worker's half],
"state": the final state dict}. Every role runs this script; `import tally` serves the
scheduler's and the server's.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = 30
BATCH = 8      # per worker; the single process takes 2 * BATCH
WORKERS = 2
LR = 0.1


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3, padding=1)
        self.conv2 = nn.Conv2d(6, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.conv2(x))
        return self.fc(x.flatten(1))


def data():
    g = torch.Generator().manual_seed(1234)
    # Four batches seen in turn: a set small enough to learn in a few dozen steps.
    x = torch.randn(4, WORKERS * BATCH, 1, 8, 8, generator=g).repeat(STEPS // 4 + 1, 1, 1, 1, 1)[:STEPS]
    # Labels a fixed linear teacher gives, so that the loss falls as the model learns.
    teacher = torch.randn(64, 5, generator=g)
    y = (x.flatten(2) @ teacher).argmax(-1)
    return x, y


def model_for(rank):
    # Each worker starts from other weights: only a working broadcast makes them equal.
    torch.manual_seed(100 + rank)
    return SmallCNN()


def half_losses(logits, y):
    return [F.cross_entropy(logits[r * BATCH:(r + 1) * BATCH], y[r * BATCH:(r + 1) * BATCH]).item()
            for r in range(WORKERS)]


def train_single(out):
    x, y = data()
    model = model_for(0)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        logits = model(x[step])
        losses.append(half_losses(logits, y[step]))
        F.cross_entropy(logits, y[step]).backward()
        opt.step()
    torch.save({"losses": losses, "state": model.state_dict()}, os.path.join(out, "single-0.pt"))


def train_worker(mode, out):
    x, y = data()
    if mode == "gloo":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        model = model_for(rank)
        net = nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's weights
        opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=0.9)
    else:
        import tally
        import tally.torch
        kv = tally.kv.create("dist_sync")
        rank = kv.rank
        model = model_for(rank)
        tally.torch.broadcast_parameters(model, kv)
        if mode == "hook":
            net = tally.torch.DistributedDataParallel(model, kv)
            opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=0.9)
        else:
            net = model
            opt = tally.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9), kv)
    mine = slice(rank * BATCH, (rank + 1) * BATCH)
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(net(x[step][mine]), y[step][mine])
        losses.append(loss.item())
        loss.backward()
        opt.step()
    torch.save({"losses": losses, "state": model.state_dict()}, os.path.join(out, "%s-%d.pt" % (mode, rank)))
    print("worker %d (%s): %d steps, last loss %.6f" % (rank, mode, STEPS, losses[-1]), flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "single":
        train_single(out)
    else:
        train_worker(mode, out)
