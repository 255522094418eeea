#!/bin/bash
# Megatron-LM 2021 style: the arguments in one quoted string, the command in a variable, run through srun + sh -c
# (the layout of NVIDIA's examples/pretrain_gpt3_175B.sh of that year; written for the tests, paths are fake).
#SBATCH --nodes=16 --ntasks-per-node=8
DIR=`pwd`
DATASET="0.5 /data/a_text_document 0.5 /data/b_text_document"
options=" \
	--tensor-model-parallel-size 8 \
	--pipeline-model-parallel-size 4 \
        --num-layers 40 \
        --hidden-size 6144 \
        --num-attention-heads 48 \
        --seq-length 2048 \
        --max-position-embeddings 2048 \
	--micro-batch-size 1 \
	--global-batch-size 512 \
	--rampup-batch-size 32 32 2000000 \
	--train-samples 100000000 \
        --lr 1.0e-4 \
	--data-path ${DATASET} \
	--vocab-file /data/gpt2-vocab.json \
	--merge-file /data/gpt2-merges.txt \
        --fp16 \
	--activations-checkpoint-method uniform \
	--activations-checkpoint-num-layers 1 "
run_cmd="python -u ${DIR}/pretrain_gpt.py $@ ${options}"
srun -l --container-image "nvcr.io/nvidia/pytorch:21.05-py3" --output=$DIR/logs/%x_%j.log sh -c "${run_cmd}"
