#!/usr/bin/env python3
"""Small PyTorch training runs whose losses are compared between a native run
and a run through tern (tests/pytorch/compare). Deterministic settings, fixed
seeds; prints one line per step, "step N loss <float.hex()>", then the median
step time.

usage: train.py MODEL [--steps N] [--graphs] [--expandable] [--mark STEP FILE]
  MODEL: mlp (AdamW), cnn (convolutions: cuDNN), transformer (attention,
  layer norm, embedding), resnet18 (torchvision's, 10 classes, untrained),
  gpt2 (Hugging Face transformers' GPT2LMHeadModel from a small GPT2Config:
  2 layers, no weights downloaded)
  --mark: after step STEP create FILE, then take --pause seconds before each
  later step, so that a test (tests/pytorch/restore) can snapshot and restore
  the session while the training goes on
"""
import argparse
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('model', choices=['mlp', 'cnn', 'transformer', 'resnet18', 'gpt2'])
    ap.add_argument('--steps', type=int, default=30)
    ap.add_argument('--graphs', action='store_true', help='capture the step in a CUDA graph')
    ap.add_argument('--expandable', action='store_true', help='expandable segments allocator')
    ap.add_argument('--mark', nargs=2, metavar=('STEP', 'FILE'))
    ap.add_argument('--pause', type=float, default=0.1)
    a = ap.parse_args()
    if a.expandable:
        os.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'expandable_segments:True'
    os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
    import torch
    import torch.nn as nn

    torch.manual_seed(1234)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device('cuda')
    print('device', torch.cuda.get_device_name(0), 'count', torch.cuda.device_count(), flush=True)

    g = torch.Generator().manual_seed(99)
    if a.model == 'mlp':
        model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(),
                              nn.Linear(512, 10))
        x = torch.randn(128, 256, generator=g)
        y = torch.randint(0, 10, (128,), generator=g)
    elif a.model == 'cnn':
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                              nn.AvgPool2d(4), nn.Flatten(), nn.Linear(32 * 16, 10))
        x = torch.randn(32, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (32,), generator=g)
    elif a.model == 'resnet18':
        import torchvision
        # Its global pooling to 1x1 is a mean (deterministic backward).
        model = torchvision.models.resnet18(weights=None, num_classes=10)
        x = torch.randn(16, 3, 64, 64, generator=g)
        y = torch.randint(0, 10, (16,), generator=g)
    elif a.model == 'gpt2':
        import transformers

        class LM(nn.Module):
            """The logits only: the loss is step()'s, as for the other models."""
            def __init__(self):
                super().__init__()
                # Eager attention: the same kernels whichever SDPA backend
                # the GPU would pick; no dropout, no key/value cache.
                cfg = transformers.GPT2Config(vocab_size=1000, n_positions=64, n_embd=128, n_layer=2,
                                              n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                                              attn_pdrop=0.0, use_cache=False,
                                              attn_implementation='eager')
                self.gpt = transformers.GPT2LMHeadModel(cfg)

            def forward(self, t):
                return self.gpt(input_ids=t, use_cache=False).logits
        model = LM()
        x = torch.randint(0, 1000, (16, 32), generator=g)
        y = torch.randint(0, 1000, (16, 32), generator=g)
    else:
        class Tiny(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(1000, 128)
                layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
                self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
                self.norm = nn.LayerNorm(128)
                self.head = nn.Linear(128, 1000)

            def forward(self, t):
                return self.head(self.norm(self.enc(self.emb(t))))
        model = Tiny()
        x = torch.randint(0, 1000, (16, 32), generator=g)
        y = torch.randint(0, 1000, (16, 32), generator=g)
    model = model.to(dev)
    x, y = x.to(dev), y.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=a.graphs)
    lossf = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=False)
        out = model(x)
        loss = lossf(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    def after(i):
        if a.mark and i >= int(a.mark[0]):
            if i == int(a.mark[0]):
                open(a.mark[1], 'w').close()
            time.sleep(a.pause)

    times = []
    if a.graphs:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):         # warm-up outside the graph, as PyTorch asks
                step()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = step()
        for i in range(a.steps):
            t0 = time.perf_counter()
            graph.replay()
            v = static_loss.item()
            times.append(time.perf_counter() - t0)
            print('step %d loss %s' % (i, float(v).hex()), flush=True)
            after(i)
    else:
        for i in range(a.steps):
            t0 = time.perf_counter()
            v = step().item()
            times.append(time.perf_counter() - t0)
            print('step %d loss %s' % (i, float(v).hex()), flush=True)
            after(i)
    print('median step %.3f ms' % (statistics.median(times[len(times) // 3:]) * 1e3))
    print('PASS train %s' % a.model)
    return 0


if __name__ == '__main__':
    sys.exit(main())
