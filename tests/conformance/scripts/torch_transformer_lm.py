"""Horovod PyTorch: a small character-level transformer language model.

The text is Python's own standard library source (bytes of a few modules every installation
has). AdamW with a linear warm-up then a cosine decay stepped every batch, gradients clipped
after Horovod has averaged them (``optimizer.synchronize()``, ``clip_grad_norm_``, then
``optimizer.step()`` under ``optimizer.skip_synchronize()``), a ``DistributedSampler`` reshuffled
every epoch, the workers' losses gathered with ``hvd.allgather`` every few steps for the log,
and the validation loss averaged over workers with ``hvd.allreduce``.

    horovodrun -np 4 -H localhost:4 --gloo python torch_transformer_lm.py
"""

# conformance: framework=torch
# conformance: metric=loss, tolerance=0.15

import argparse
import math
import os

import harness
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser(description="PyTorch char-level transformer LM")
parser.add_argument("--batch-size", type=int, default=16, help="sequences per worker and step")
parser.add_argument("--seq-len", type=int, default=64, help="characters per sequence")
parser.add_argument("--epochs", type=int, default=2, help="number of epochs")
parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
parser.add_argument("--warmup-steps", type=int, default=6, help="linear warm-up steps")
parser.add_argument("--clip", type=float, default=1.0, help="gradient norm clipping")
parser.add_argument("--log-every", type=int, default=10, help="steps between loss logs")
parser.add_argument("--seed", type=int, default=1, help="random seed")

MODULES = ["argparse.py", "textwrap.py", "json/decoder.py", "json/encoder.py", "string.py"]


def load_text(limit=80_000):
    root = os.path.dirname(os.__file__)
    data = b"".join(open(os.path.join(root, m), "rb").read() for m in MODULES)
    return torch.tensor(list(data[:limit]), dtype=torch.long)


class Chunks(Dataset):
    """Non-overlapping windows of ``seq_len + 1`` bytes: input and next-byte target."""

    def __init__(self, data, seq_len):
        self.data, self.seq_len = data, seq_len

    def __len__(self):
        return (len(self.data) - 1) // self.seq_len

    def __getitem__(self, i):
        chunk = self.data[i * self.seq_len : (i + 1) * self.seq_len + 1]
        return chunk[:-1], chunk[1:]


class CharTransformer(torch.nn.Module):
    def __init__(self, seq_len, vocab=256, dim=64, heads=4, layers=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.zeros(1, seq_len, dim))
        layer = torch.nn.TransformerEncoderLayer(
            dim, heads, dim_feedforward=4 * dim, dropout=0.1, batch_first=True, norm_first=True
        )
        self.blocks = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(seq_len))

    def forward(self, x):
        h = self.embed(x) + self.pos[:, : x.shape[1]]
        h = self.blocks(h, mask=self.mask[: x.shape[1], : x.shape[1]], is_causal=True)
        return self.head(self.norm(h))


def warmup_cosine(warmup, total):
    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def validate(model, loader, sampler):
    model.eval()
    total = torch.tensor(0.0)
    with torch.no_grad():
        for x, y in loader:
            logits = model(x)
            total += F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1), reduction="sum")
    # Horovod: average the per-character loss over all workers.
    return hvd.allreduce(total / (len(sampler) * x.shape[1])).item()


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    data = load_text()
    split = int(len(data) * 0.9)
    train_set, val_set = Chunks(data[:split], args.seq_len), Chunks(data[split:], args.seq_len)
    train_sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                       seed=args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler,
                              drop_last=True)
    val_sampler = DistributedSampler(val_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                     shuffle=False)
    val_loader = DataLoader(val_set, batch_size=64, sampler=val_sampler)

    model = CharTransformer(args.seq_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    total_steps = args.epochs * len(train_loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(args.warmup_steps, total_steps)
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    step = 0
    for epoch in range(args.epochs):
        model.train()
        train_sampler.set_epoch(epoch)
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
            loss.backward()
            # Horovod: average the gradients first, clip the averaged ones, then step.
            optimizer.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            with optimizer.skip_synchronize():
                optimizer.step()
            scheduler.step()
            harness.slow_step()
            step += 1
            if step % args.log_every == 0:
                losses = hvd.allgather(loss.detach().reshape(1))
                if len(losses) != hvd.size():
                    raise RuntimeError(f"allgather gave {len(losses)} losses, not {hvd.size()}")
                if hvd.rank() == 0:
                    print(f"step {step}/{total_steps} lr {scheduler.get_last_lr()[0]:.2e} "
                          f"losses {[round(v, 3) for v in losses.tolist()]}")
        val_loss = validate(model, val_loader, val_sampler)
        if hvd.rank() == 0:
            print(f"epoch {epoch}: validation loss {val_loss:.4f} "
                  f"(perplexity {math.exp(val_loss):.2f})")

    harness.report(model, val_loss)


if __name__ == "__main__":
    main()
