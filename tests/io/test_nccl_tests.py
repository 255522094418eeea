import json
import warnings
from pathlib import Path

import pytest

from trainsim.errors import TrainsimError, TrainsimWarning
from trainsim.io.nccl_tests import collective_name, comm_table, parse, parse_text, read_nccl_tests

DATA = Path(__file__).parent / "data"


def test_current_layout_single_node():
    (run,) = read_nccl_tests(DATA / "all_reduce_8xh100.txt")
    assert run.collective == "all_reduce" and run.num_ranks == 8 and run.num_nodes == 1
    assert run.device_name == "NVIDIA H100 80GB HBM3" and run.nccl_version == "2.27.3"
    assert len(run.rows) == 2 * 23  # 1 KB .. 4 GB, out-of-place and in-place
    first_oop, first_ip = run.rows[0], run.rows[1]
    assert first_oop["nbytes"] == 1024 and first_oop["count"] == 256 and first_oop["dtype"] == "float"
    assert first_oop["redop"] == "sum" and not first_oop["in_place"] and first_ip["in_place"]
    assert first_oop["time_s"] == pytest.approx(16.44e-6) and first_ip["time_s"] == pytest.approx(16.21e-6)
    last = run.rows[-2]
    assert last["nbytes"] == 4294967296 and last["time_s"] == pytest.approx(20117.6e-6)
    assert last["busbw"] == pytest.approx(373.61e9) and last["algbw"] == pytest.approx(213.49e9)
    assert last["wrong"] == 0


def test_old_layout_with_mpirun_tag_output_and_nccl_noise():
    (run,) = read_nccl_tests(DATA / "all_gather_16xa100_mpirun_old.txt")
    assert run.program == "all_gather_perf" and run.collective == "all_gather"  # from the mpirun command line
    assert run.num_ranks == 16 and run.num_nodes == 2 and run.device_name == "A100-SXM4-80GB"
    assert run.nccl_version == "2.10.3"
    assert len(run.rows) == 2 * 11 and run.skipped_lines == 0  # 1 MB .. 1 GB; the NCCL INFO line is ignored
    row = run.rows[0]
    assert row["nbytes"] == 1 << 20 and row["redop"] == "" and row["time_s"] == pytest.approx(42.12e-6)
    assert row["busbw"] == pytest.approx(23.34e9) and row["wrong"] == 0
    assert run.rows[1]["in_place"] and run.rows[1]["time_s"] == pytest.approx(43.28e-6)
    table = comm_table([run], source="x")
    assert set(table["gpu"]) == {"a100"} and set(table["ranks"]) == {16} and set(table["nodes"]) == {2}


def test_srun_labels_and_a_log_that_does_not_name_its_collective():
    runs = read_nccl_tests(DATA / "reduce_scatter_16xh100_srun.txt")
    (run,) = runs
    assert run.collective is None and run.num_ranks == 16 and run.num_nodes == 2
    assert run.rows[0]["dtype"] == "bfloat16" and len(run.rows) == 2 * 7
    with pytest.raises(TrainsimError, match="--collective"):
        comm_table(runs)
    table = comm_table(runs, collective="reduce_scatter")
    assert set(table["collective"]) == {"reduce_scatter"} and set(table["gpu"]) == {"h100"}
    assert table["time_s"].min() > 0 and (table["busbw"] > 0).all()


def test_two_runs_in_one_log_with_host_prefixes():
    runs = read_nccl_tests(DATA / "sendrecv_alltoall_8xh200_pdsh.txt")
    assert [r.collective for r in runs] == ["send_recv", "all_to_all"]
    assert all(r.num_ranks == 8 and r.device_name == "NVIDIA H200" for r in runs)
    both = comm_table(runs)
    assert sorted(set(both["collective"])) == ["all_to_all", "send_recv"]
    only = comm_table(runs, collective="alltoall")
    assert set(only["collective"]) == {"all_to_all"} and len(only) == 2 * 9
    with pytest.raises(TrainsimError, match="not all_reduce"):
        comm_table(runs, collective="all_reduce")


def test_nccl_tests_json_output():
    (run,) = read_nccl_tests(DATA / "all_reduce_16xh100.json")
    assert run.collective == "all_reduce" and run.num_ranks == 16 and run.num_nodes == 2
    assert run.nccl_version == "2.27.3" and run.device_name == "NVIDIA H100 80GB HBM3"
    doc = json.loads((DATA / "all_reduce_16xh100.json").read_text())
    first = doc["results"][0]
    assert run.rows[0]["time_s"] == pytest.approx(first["out_of_place"]["time"] * 1e-6)
    assert run.rows[1]["in_place"] and run.rows[0]["busbw"] == pytest.approx(first["out_of_place"]["bus_bw"] * 1e9)
    assert len(run.rows) == 2 * len(doc["results"])


def test_rccl_json_lines():
    (run,) = read_nccl_tests(DATA / "rccl_all_reduce_4gpu.jsonl")
    assert run.collective == "all_reduce" and run.num_ranks == 4 and run.device_name == ""
    table = comm_table([run])
    assert set(table["nodes"]) == {1} and set(table["gpu"]) == {""}
    assert table["in_place"].sum() == len(table) / 2


def test_cpu_time_json_and_null_out_of_place():
    doc = {"version": 2, "args": ["./build/reduce_scatter_perf"], "nccl_version": 22105,
           "config": {"devices": [{"rank": r, "hostname": "n1", "device_info": "NVIDIA H100 80GB HBM3"}
                                  for r in range(2)]},
           "results": [{"size": 4096, "count": 512, "type": "float", "redop": "sum", "root": "-1",
                        "out_of_place": None, "in_place": {"cpu_time": 12.5, "alg_bw": 0.3, "bus_bw": 0.15,
                                                           "nwrong": None}}]}
    (run,) = parse(json.dumps(doc))
    assert run.collective == "reduce_scatter" and run.nccl_version == "2.21.5"
    assert len(run.rows) == 1 and run.rows[0]["in_place"] and run.rows[0]["time_s"] == pytest.approx(12.5e-6)


HEADERLESS = """\
     1048576        262144     float     sum      -1    37.52   27.95   48.91      0    36.80   28.49   49.86      0
     2097152        524288     float     sum      -1    52.10   40.25   70.44      0    51.00   41.12   71.96      0
"""


def test_a_log_cut_before_its_header_is_read_from_the_field_count():
    (run,) = parse_text(HEADERLESS)
    assert run.collective is None and len(run.rows) == 4 and run.rows[2]["time_s"] == pytest.approx(52.10e-6)
    table = comm_table([run], collective="all_reduce", num_gpus=8)
    assert set(table["ranks"]) == {8} and set(table["nodes"]) == {1}
    with pytest.raises(TrainsimError, match="--num-gpus"):
        comm_table([run], collective="all_reduce")


def test_units_line_scales_times_and_bandwidths():
    text = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
            "   busbw #wrong\n#        (B)    (elements)                               (ms)  (MB/s)  (MB/s)     "
            "       (ms)  (MB/s)  (MB/s)\n"
            "     1048576        262144     float     sum      -1    1.50   699.1  1223.4      0    1.40   749.0"
            "  1310.7    N/A\n")
    (run,) = parse_text(text)
    assert run.rows[0]["time_s"] == pytest.approx(1.5e-3) and run.rows[0]["busbw"] == pytest.approx(1223.4e6)
    assert run.rows[1]["wrong"] != run.rows[1]["wrong"]  # N/A -> NaN


def test_inconsistent_or_missing_information_is_a_clear_error():
    runs = read_nccl_tests(DATA / "all_reduce_8xh100.txt")
    with pytest.raises(TrainsimError, match="lists 8 ranks, not 16"):
        comm_table(runs, num_gpus=16)
    with pytest.raises(TrainsimError, match="1 host"):
        comm_table(runs, nodes=2)
    with pytest.raises(TrainsimError, match="no nccl-tests results"):
        comm_table(parse("hello\nworld\n"))
    with pytest.raises(TrainsimError, match="not modelled"):
        comm_table(runs, collective="broadcast")
    with pytest.raises(TrainsimError, match="unknown collective"):
        comm_table(runs, collective="allsum")
    broadcast = parse("# Collective test starting: broadcast_perf\n" + HEADERLESS)
    with pytest.raises(TrainsimError, match="does not model"):
        comm_table(broadcast, num_gpus=8)
    with pytest.raises(TrainsimError, match="does not exist"):
        read_nccl_tests(DATA / "nope.txt")


def test_wrong_results_warn_but_keep_their_times():
    text = HEADERLESS.replace("48.91      0", "48.91      3")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TrainsimWarning)
        table = comm_table(parse_text(text), collective="all_reduce", num_gpus=8)
    assert any("wrong values" in str(w.message) for w in caught)
    assert len(table) == 4


@pytest.mark.parametrize(("name", "expected"), [
    ("all_reduce_perf", "all_reduce"), ("./build/all_gather_perf_mpi", "all_gather"), ("AllReduce", "all_reduce"),
    ("ReduceScatter", "reduce_scatter"), ("alltoall", "all_to_all"), ("all-to-all", "all_to_all"),
    ("sendrecv_perf", "send_recv"), ("broadcast_perf", None),
])
def test_collective_names(name, expected):
    assert collective_name(name) == expected


def test_a_blank_out_of_place_group_is_read_as_in_place():
    header = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
              "   busbw #wrong\n")
    line = "     1048576        262144     float     sum      -1" + " " * 36 + "36.80   28.49   49.86      0\n"
    (run,) = parse_text("# Collective test starting: all_reduce_perf\n" + header + line)
    (row,) = run.rows
    assert row["in_place"] and row["time_s"] == pytest.approx(36.80e-6) and row["busbw"] == pytest.approx(49.86e9)
