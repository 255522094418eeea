"""Launch scripts read as bash would run them (trainsim.cli.shell_script): the forms real Megatron-LM,
Megatron-DeepSpeed and BigScience scripts use."""

from __future__ import annotations

import json

import pytest

from trainsim.cli.shell_script import expand, read_script
from trainsim.errors import TrainsimError

ARGS = "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --vocab-size 1000"


def _read(tmp_path, text):
    path = tmp_path / "train.sh"
    path.write_text(text)
    return read_script(path)


def test_arrays_appends_and_comments_inside_arrays(tmp_path):
    cmd = _read(tmp_path, f"A=({ARGS})\nA+=(--bf16 \"--fp8-format hybrid\")\nB=(\n  --tensor-model-parallel-size 2\n"
                          "#  --pipeline-model-parallel-size 2\n  --sequence-parallel  # SP with TP\n)\n"
                          "torchrun --nproc_per_node 8 pretrain_gpt.py ${A[@]} ${B[@]}\n")
    assert cmd.args[-6:] == ["--bf16", "--fp8-format", "hybrid", "--tensor-model-parallel-size", "2",
                             "--sequence-parallel"]
    assert "--pipeline-model-parallel-size" not in cmd.args and "--bf16" in cmd.args
    assert cmd.gpus == 8 and cmd.launcher == "torchrun" and cmd.entry == "pretrain_gpt.py"


def test_conditionals_take_the_branch_bash_takes(tmp_path):
    cmd = _read(tmp_path, 'P=pretrain_gpt.py\nDTYPE="fp8"\nRC=0\n'
                          'if [ ! -f "$P" ]; then\n  echo missing\n  exit 1\nfi\n'
                          'if [[ "$DTYPE" == "fp8" ]] && [ "$RC" -eq 0 ]; then\n  X="--fp8-format hybrid"\n'
                          'elif [[ "$DTYPE" == "bf16" ]]; then\n  X=--bf16\nelse\n  X=--fp16\nfi\n'
                          f'if [ "$RC" -eq 1 ]; then X="$X --recompute-granularity full"; fi\n'
                          f"torchrun --nproc-per-node=4 --nnodes 2 $P {ARGS} $X\n")
    assert cmd.args[-2:] == ["--fp8-format", "hybrid"] and "--recompute-granularity" not in cmd.args
    assert cmd.gpus == 8 and not cmd.notes


def test_multiline_strings_nested_defaults_and_comment_ending_in_backslash(tmp_path):
    cmd = _read(tmp_path, 'D=/x\nM=${M:-"${D}/y"}\nT=${3:-"MOCK"}\n'
                          'ARGS="\n  --num-layers 2 \\\n  --hidden-size 256\n"\n'
                          "#   --old-flag \\\nexport CMD=\" `pwd`/pretrain_gpt.py $ARGS --data-path $M --tok $T\"\n"
                          'echo $CMD\nsrun --jobid 1 bash -c "python -m torch.distributed.run --nproc_per_node 8 '
                          '--nnodes $SLURM_NNODES $CMD" 2>&1 | tee -a log.txt\n'.replace("SLURM_NNODES", "N"))
    assert cmd.args == ["--num-layers", "2", "--hidden-size", "256", "--data-path", "/x/y", "--tok", "MOCK"]
    assert cmd.launcher == "torchrun" and cmd.gpus is None and any("-n GPUS" in n for n in cmd.notes)


def test_sbatch_header_gives_the_nodes_and_heredoc_files_are_kept(tmp_path):
    cmd = _read(tmp_path, "#!/bin/bash\n#SBATCH --nodes=24\n#SBATCH --gres=gpu:8\nMBS=2\ncfg=./ds.$SLURM_JOB_ID.json\n"
                          'cat <<EOT > $cfg\n{"train_micro_batch_size_per_gpu": $MBS, "bf16": {"enabled": true}}\nEOT\n'
                          "python -u -m torch.distributed.run --nproc_per_node 8 --nnodes $SLURM_NNODES "
                          "pretrain_gpt.py "
                          f"{ARGS} --deepspeed_config $cfg &> out.log &\n")
    assert cmd.gpus == 192 and "&" not in cmd.args and "out.log" not in cmd.args
    assert json.loads(cmd.files["./ds.$SLURM_JOB_ID.json"]) == {"train_micro_batch_size_per_gpu": 2,
                                                                "bf16": {"enabled": True}}


def test_deepspeed_launcher_without_gpu_count_says_so(tmp_path):
    cmd = _read(tmp_path, f"deepspeed pretrain_gpt.py {ARGS} --deepspeed\n")
    assert cmd.gpus is None and any("hostfile" in n for n in cmd.notes)
    assert _read(tmp_path, f"deepspeed --num_gpus 4 --num_nodes 2 pretrain_gpt.py {ARGS}\n").gpus == 8


def test_scripts_that_run_another_script_are_refused_naming_it(tmp_path):
    with pytest.raises(TrainsimError, match=r"train_mixtral_moe\.sh"):
        _read(tmp_path, "srun bash -c 'cd /m; MBS=1 bash examples/mixtral/train_mixtral_moe.sh'\n")


@pytest.mark.parametrize(("text", "env", "out"), [
    ("${A:-${B:-z}}", {}, "z"), ("${A:+yes}", {"A": "1"}, "yes"), ("$((2*$N+1))", {"N": "3"}, "7"),
    ("'$A'", {"A": "1"}, "'$A'"), ("${#A}", {"A": "abc"}, "3"), ("$1", {}, "$1"), ("$(pwd)/x", {}, "./x"),
])
def test_expansions(text, env, out):
    assert expand(text, env) == out


def test_an_exit_in_an_undecided_branch_does_not_end_the_script(tmp_path):
    """A usage check or debug switch the reader cannot decide (positional arguments, unset variables) is read, but
    its exit does not stop the reading of the launch that follows."""
    cmd = _read(tmp_path, 'if [ "$MODE" = "debug" ]; then\n  exit 0\nfi\n'
                          'torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2\n')
    assert cmd.args == ["--num-layers", "2"] and cmd.gpus == 8
    with pytest.raises(TrainsimError, match="no Megatron command line"):  # a decided exit ends it, as in bash
        _read(tmp_path, 'A=1\nif [ "$A" = "1" ]; then\n  exit 0\nfi\ntorchrun pretrain_gpt.py --num-layers 2\n')


def test_double_bracket_logic_arithmetic_conditions_and_nested_arithmetic(tmp_path):
    cmd = _read(tmp_path, 'TP=1\nPP=2\nW=16\nDP=$((W / (TP * PP)))\nOV=$(( ($TP > 1) ? 1 : 0 ))\n'
                          'if [[ $TP == 1 && $PP == 2 ]]; then L=4; else L=8; fi\n'
                          'if (( OV == 0 )); then X=--no-x; fi\n'
                          'torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers $L --gbs $((DP * 2)) --ov $OV\n')
    assert cmd.args[:6] == ["--num-layers", "4", "--gbs", "16", "--ov", "0"]


def test_quoted_array_elements_srun_tasks_and_binding_wrappers(tmp_path):
    cmd = _read(tmp_path, "A=(--pipeline-model-parallel-layout 'Et|tL' --moe-layer-freq \"([0]*1+[1]*1)\")\n"
                          'srun -n 16 python pretrain_gpt.py "${A[@]}"\n')
    assert cmd.args == ["--pipeline-model-parallel-layout", "Et|tL", "--moe-layer-freq", "([0]*1+[1]*1)"]
    assert cmd.gpus == 16  # one srun task per GPU
    cmd = _read(tmp_path, "torchrun --nproc_per_node 4 /opt/bindpcie /w/pretrain_gpt.py --num-layers 2\n")
    assert cmd.args == ["--num-layers", "2"] and cmd.gpus == 4


def test_case_blocks_read_the_arm_bash_takes(tmp_path):
    """case MODEL in 7B) ...;; 13B|14B) ...;; *) ...;; esac: the first matching arm is read, the others skipped; an
    unexpanded subject reads only the * arm, with a note."""
    body = ('case $SIZE in\n  7B)\n    L=32\n    ;;\n  13B|14B) L=40; H=5120 ;;\n  *) L=2 ;;\nesac\n'
            'torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers $L\n')
    assert _read(tmp_path, "SIZE=7B\n" + body).args == ["--num-layers", "32"]
    assert _read(tmp_path, "SIZE=14B\n" + body).args == ["--num-layers", "40"]
    cmd = _read(tmp_path, body)
    assert cmd.args == ["--num-layers", "2"] and any("case subject" in n for n in cmd.notes)
