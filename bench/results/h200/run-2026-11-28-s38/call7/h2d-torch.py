import torch, time
torch.cuda.init()
s = torch.cuda.Stream()
for kb in (3, 8, 25, 50, 100):
    n = kb * 256
    h = torch.empty(n, dtype=torch.float32, pin_memory=True)
    d = torch.empty(n, dtype=torch.float32, device='cuda')
    for _ in range(20): d.copy_(h, non_blocking=True); torch.cuda.synchronize()
    ts = []
    for _ in range(200):
        t0 = time.perf_counter(); d.copy_(h, non_blocking=True); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    ts.sort()
    print("H2D %3d KB pinned: host-to-host median %.1f us, p10 %.1f us" % (kb, ts[100] * 1e6, ts[20] * 1e6))
