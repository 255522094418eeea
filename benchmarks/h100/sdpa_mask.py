"""Forward+backward time of torch SDPA (bf16, GQA expanded as transformers does) with is_causal=True, with no mask,
and with an explicit boolean causal mask of shape (b, 1, s, s), the mask transformers passes when it is traced by
torch.compile. Writes DIR/sdpa_mask.csv.   python benchmarks/h100/sdpa_mask.py --out DIR"""
import csv
import os
import sys

import torch
import torch.nn.functional as F

out = sys.argv[sys.argv.index("--out") + 1]
rows = []
for b, h, s, d in [(2, 32, 4096, 64), (1, 32, 4096, 128), (4, 16, 2048, 128), (2, 32, 2048, 64), (1, 32, 8192, 128),
                   (8, 16, 1024, 64)]:
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    g = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    mask = torch.ones(s, s, device="cuda", dtype=torch.bool).tril()[None, None].expand(b, 1, s, s)
    for mode in ("causal", "none", "bool-mask"):
        kw = dict(is_causal=True) if mode == "causal" else dict(attn_mask=mask) if mode == "bool-mask" else {}

        def f(q=q, k=k, v=v, g=g, kw=kw):
            o = F.scaled_dot_product_attention(q, k, v, **kw)
            o.backward(g)
        for _ in range(3):
            f()
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record()
        for _ in range(10):
            f()
        en.record()
        torch.cuda.synchronize()
        rows.append(dict(b=b, heads=h, seq=s, head_dim=d, mode=mode, fwd_bwd_s=st.elapsed_time(en) / 10 / 1e3))
        print(rows[-1], flush=True)
with open(os.path.join(out, "sdpa_mask.csv"), "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
