#!/usr/bin/env bash
# Submit a farm as separate jobs: the head first, then CPU and GPU nodes that start once the head
# has started (they wait for its head.env themselves).
#
#   ops/slurm/submit.sh [CPU_NODES] [GPU_NODES]
#
# Settings come from the environment or from FARM_OPS_ENV (see farm.env.example).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export FARM_OPS_DIR="$here"
cpu_nodes="${1:-2}"
gpu_nodes="${2:-1}"

head=$(sbatch --parsable --export=ALL "$here/head.sbatch")
echo "head job $head"
if ((cpu_nodes > 0)); then
    cpu=$(sbatch --parsable --export=ALL --dependency="after:$head" --nodes="$cpu_nodes" "$here/cpu.sbatch")
    echo "cpu job $cpu ($cpu_nodes nodes)"
fi
if ((gpu_nodes > 0)); then
    gpu=$(sbatch --parsable --export=ALL --dependency="after:$head" --nodes="$gpu_nodes" "$here/gpu.sbatch")
    echo "gpu job $gpu ($gpu_nodes nodes)"
fi
echo "the farm is ready when ${FARM_SHARED_DIR:-$HOME/rollout-farm}/head.env exists"
