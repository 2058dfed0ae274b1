"""A small DistilBERT-like text classifier trained by two workers through Tally's servers.

The task: from a passage of 24 words, tell which licence text of Debian's
/usr/share/common-licenses it comes from (GPL-3, GFDL-1.3, MPL-2.0 or Apache-2.0). Each
text's first 80% gives the training passages, its last 20% the held-out ones. The model: a
transformer encoder (token and position embeddings, 2 pre-norm layers of 4 heads, GELU) whose
first position, a [CLS] token, feeds a linear classifier, as in DistilBERT.

    tools/launch.py -n 2 -s 1 --launcher local --env PYTHONPATH:$PWD/build/python \\
        /usr/bin/python3 examples/text_classifier.py

Every role runs this script (`import tally` serves the scheduler's and the server's role);
each worker trains on its share of every batch, and tally.torch's DDP hook averages the
gradients through the servers. `--mode gloo` trains the same way with torch's DDP over gloo
instead (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set by the caller), which
`python3 -m tally.bench_torch` compares it with.
"""
import argparse
import os
import time
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

LICENSES = ("GPL-3", "GFDL-1.3", "MPL-2.0", "Apache-2.0")
LICENSE_DIR = "/usr/share/common-licenses"
WORDS, STRIDE = 24, 4
VOCAB = 4096          # ids 2.. are hashed words, 1 is [CLS]; 0 is unused (passages are all one length)
CLS = 1


def word_id(word):
    # crc32, unlike hash(), is the same in every process: the workers must agree on ids.
    return 2 + zlib.crc32(word.lower().strip(".,;:()\"'").encode()) % (VOCAB - 2)


def passages(license_dir):
    """(train_x, train_y, test_x, test_y): passages of WORDS word ids behind a [CLS]."""
    sets = {"train": ([], []), "test": ([], [])}
    for label, name in enumerate(LICENSES):
        path = os.path.join(license_dir, name)
        if not os.path.exists(path):
            raise SystemExit("text_classifier: %s is missing (Debian's base-files installs it)" % path)
        with open(path, encoding="utf-8", errors="replace") as f:
            ids = [word_id(w) for w in f.read().split()]
        cut = int(len(ids) * 0.8)
        for part, lo, hi in (("train", 0, cut), ("test", cut, len(ids))):
            for start in range(lo, hi - WORDS + 1, STRIDE):
                sets[part][0].append([CLS] + ids[start:start + WORDS])
                sets[part][1].append(label)
    return tuple(torch.tensor(v) for part in ("train", "test") for v in sets[part])


class TextClassifier(nn.Module):
    """DistilBERT's shape, scaled down: embeddings, pre-norm encoder layers, [CLS] head."""

    def __init__(self, vocab=VOCAB, dim=128, heads=4, layers=2, classes=len(LICENSES), length=WORDS + 1):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(length, dim)
        self.norm = nn.LayerNorm(dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.norm(self.tokens(ids) + self.positions(pos))
        return self.head(self.encoder(h)[:, 0])


def distributed_model(mode, model):
    """(DDP-wrapped model, rank, workers) for --mode tally or gloo."""
    if mode == "gloo":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        return nn.parallel.DistributedDataParallel(model), dist.get_rank(), dist.get_world_size()
    import tally
    import tally.torch
    kv = tally.kv.create("dist_sync")
    tally.torch.broadcast_parameters(model, kv)   # a one-process group broadcasts nothing
    return tally.torch.DistributedDataParallel(model, kv), kv.rank, kv.num_workers


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        right = (model(x).argmax(-1) == y).sum().item()
    model.train()
    return right / len(y)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=("tally", "gloo"), default="tally",
                   help="tally: tally.torch's DDP hook (under tools/launch.py); gloo: torch's DDP over gloo")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="per worker (default: %(default)s)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--steps", type=int, default=0,
                   help="time this many steps after 5 warm-up ones and print their mean, instead of training epochs")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker (default: %(default)s)")
    p.add_argument("--license-dir", default=LICENSE_DIR)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    train_x, train_y, test_x, test_y = passages(args.license_dir)
    torch.manual_seed(0)
    model = TextClassifier()
    net, rank, workers = distributed_model(args.mode, model)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(1)   # the same order on every worker
    global_batch = args.batch_size * workers

    def step(batch):
        mine = batch[rank * args.batch_size:(rank + 1) * args.batch_size]
        opt.zero_grad()
        loss = F.cross_entropy(net(train_x[mine]), train_y[mine])
        loss.backward()
        opt.step()
        return loss.item()

    if args.steps:
        order = torch.randperm(len(train_y), generator=gen).repeat(2 + (5 + args.steps) * global_batch // len(train_y))
        batches = order.split(global_batch)
        for b in batches[:5]:
            step(b)
        start = time.perf_counter()
        for b in batches[5:5 + args.steps]:
            step(b)
        ms = (time.perf_counter() - start) * 1000 / args.steps
        print("worker %d: mode %s step_ms %.3f over %d steps" % (rank, args.mode, ms, args.steps), flush=True)
        return
    if rank == 0:
        print("%d training passages, %d held out, %d classes; %d parameters; %d workers"
              % (len(train_y), len(test_y), len(LICENSES), sum(p.numel() for p in model.parameters()), workers))
    for epoch in range(args.epochs):
        order = torch.randperm(len(train_y), generator=gen)
        batches = order[:len(order) // global_batch * global_batch].split(global_batch)
        losses = [step(b) for b in batches]
        if rank == 0:
            print("epoch %d: loss %.4f, held-out accuracy %.3f"
                  % (epoch, sum(losses) / len(losses), accuracy(model, test_x, test_y)), flush=True)


if __name__ == "__main__":
    main()
