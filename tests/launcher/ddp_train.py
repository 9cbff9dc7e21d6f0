"""A small PyTorch DDP training run (Gloo, init_method env://) for comparing launchers.

It reads only what torchrun gives a worker (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT),
trains a two-layer classifier on synthetic data for --steps SGD steps (every rank takes its share
of each global batch), and rank 0 prints the global loss of every step and a digest of the final
parameters:
    step 1 loss 1.386294365
    digest 5f0c...  (sha256 of the parameters' bytes)  sum 1.234567890123
Everything is seeded and single-threaded, so the same world size gives the same bits under any
launcher and on any number of nodes.
"""
import argparse
import datetime
import hashlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16, help="global batch, all ranks together")
    args = parser.parse_args()

    torch.set_num_threads(1)
    # A collective that a lost peer leaves waiting fails in a minute, not in Gloo's default 30.
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    assert 0 <= int(os.environ["LOCAL_RANK"]) < int(os.environ["LOCAL_WORLD_SIZE"])
    assert args.batch % world == 0, "the global batch must split evenly"

    data = torch.Generator().manual_seed(1234)
    inputs = torch.randn(256, 16, generator=data)
    labels = torch.randint(0, 4, (256,), generator=data)

    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(1, args.steps + 1):
        first = (step - 1) * args.batch % inputs.shape[0]
        rows = torch.arange(first, first + args.batch)[rank::world]
        loss = loss_fn(model(inputs[rows]), labels[rows])
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients over the ranks
        optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            print(f"step {step} loss {total.item() / world:.9f}", flush=True)

    params = torch.cat([p.detach().reshape(-1) for p in model.module.parameters()])
    if rank == 0:
        digest = hashlib.sha256(params.numpy().tobytes()).hexdigest()
        print(f"digest {digest} sum {params.double().sum().item():.12f} world {world}", flush=True)
    # No barrier before leaving: the last step's all-reduce already met every rank. Under PyTorch's own
    # torchrun (two nodes, a loaded machine) rank 1 once stayed 14 minutes after its last step, in
    # the barrier or the teardown; with no collective left, and the timeout above, none can wait long.
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
