#!/usr/bin/env bash
# A CPU worker node: one Celery worker process per stage in $FARM_NODE_QUEUES, all with
# FARM_NODE=$SLURMD_NODENAME so the run stage of a job stays on the node that initialised its sandbox.
set -euo pipefail
# shellcheck source=lib.sh
source "${FARM_OPS_DIR:?set FARM_OPS_DIR to the ops/slurm directory}/lib.sh"

: "${FARM_NODE_QUEUES:=init,run,eval}"   # e.g. init,run on sandbox nodes and eval on others
: "${FARM_INIT_POOL:=threads}"
: "${FARM_INIT_CONCURRENCY:=8}"
: "${FARM_RUN_POOL:=threads}"            # LLM-bound: many threads per process
: "${FARM_RUN_CONCURRENCY:=32}"
: "${FARM_EVAL_POOL:=threads}"
: "${FARM_EVAL_CONCURRENCY:=8}"
: "${FARM_WORKER_LOGLEVEL:=info}"
: "${FARM_WORKDIR:=/tmp/rollout-farm-${USER:-farm}}"   # node-local scratch for sandboxes

export FARM_NODE="${SLURMD_NODENAME:-$(hostname -s)}"
export FARM_WORKDIR
mkdir -p "$FARM_WORKDIR"

IFS=',' read -r -a queues <<<"$FARM_NODE_QUEUES"
has_queue() {
    local q
    for q in "${queues[@]}"; do [[ "$q" == "$1" ]] && return 0; done
    return 1
}
for q in "${queues[@]}"; do
    [[ "$q" =~ ^(init|run|eval)$ ]] || die "unknown queue '$q' in FARM_NODE_QUEUES (init, run, eval)"
done
# A sandbox prepared here must be run here: init without a local run worker would strand it.
if has_queue init && ! has_queue run; then
    die "FARM_NODE_QUEUES=$FARM_NODE_QUEUES has init but no run: add run to keep sandboxes on this node"
fi

load_head_env
log "joining the farm at $FARM_API_URL as node $FARM_NODE with queues $FARM_NODE_QUEUES"

for q in "${queues[@]}"; do
    pool_var="FARM_${q^^}_POOL"
    conc_var="FARM_${q^^}_CONCURRENCY"
    # Each worker name is unique per node and stage; --statedb keeps revoked ids across restarts.
    start_child "worker-$q" "$FARM_EXEC" celery -A farm worker -Q "$q" \
        -P "${!pool_var}" -c "${!conc_var}" -n "$q@$FARM_NODE" \
        --statedb "$FARM_WORKDIR/celery-$q.state" \
        --without-gossip --without-mingle -l "$FARM_WORKER_LOGLEVEL"
done

supervise
