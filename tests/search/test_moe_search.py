"""Expert parallelism and expert tensor parallelism as search dimensions."""

import json

from cli_helpers import run


def test_etp_is_a_search_dimension(capsys):
    code, out, err = run(["search", "-m", "qwen3-30b-a3b", "-n", "16", "--gbs", "64", "--tp", "2", "--pp", "1",
                          "--ep", "8", "--etp", "all", "--sequence-parallel", "--mbs", "1",
                          "--recompute-granularity", "none", "--use-distributed-optimizer", "--cp", "1", "--vpp", "1",
                          "--rank-order", "tp-cp-ep-dp-pp", "--json"], capsys)
    assert code == 0, err
    cands = json.loads(out)["candidates"]
    by_etp = {c["etp"]: c for c in cands}
    assert set(by_etp) == {1, 2}
    # folding experts to etp 1 under attention tp 2: full-width expert GEMMs, no expert-TP all-gather; each GPU holds
    # twice the expert weights
    assert by_etp[1]["iteration_time_s"] < by_etp[2]["iteration_time_s"]
    assert by_etp[1]["peak_memory_bytes"] > by_etp[2]["peak_memory_bytes"]


def test_open_ep_covers_the_divisors_of_the_experts(capsys):
    code, out, err = run(["search", "-m", "mixtral-8x7b", "-n", "16", "--gbs", "64", "--tp", "1", "--pp", "1",
                          "--ep", "all", "--mbs", "1", "--recompute-granularity", "full",
                          "--use-distributed-optimizer", "--cp", "1", "--vpp", "1", "--rank-order", "tp-cp-ep-dp-pp",
                          "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["summary"]["valid"] == 4  # ep 1, 2, 4, 8
    assert [c["ep"] for c in d["candidates"]] == [8]  # only ep 8 shards the experts enough to fit in 80 GB
