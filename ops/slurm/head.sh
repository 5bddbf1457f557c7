#!/usr/bin/env bash
# The head node: Redis (AOF on), the REST API + model gateway, and Flower.
# Started once per farm by head.sbatch (or het group 0 of farm-hetjob.sbatch). When everything
# answers it writes $FARM_SHARED_DIR/head.env, which worker and GPU nodes read to find the farm.
set -euo pipefail
# shellcheck source=lib.sh
source "${FARM_OPS_DIR:?set FARM_OPS_DIR to the ops/slurm directory}/lib.sh"

: "${FARM_REDIS_DIR:=$FARM_SHARED_DIR/redis}"   # AOF lives here: keep it across head restarts
: "${FARM_REDIS_MAXMEMORY:=0}"                  # 0 = no limit; job records expire by FARM_RESULT_TTL_S
HEAD_HOST="${FARM_HEAD_HOST:-$(hostname -f)}"

mkdir -p "$FARM_REDIS_DIR" "$FARM_SHARED_DIR"
rm -f "$HEAD_ENV_FILE"
trap 'rm -f "$HEAD_ENV_FILE"' EXIT

redis_auth=()
redis_userinfo=""
if [[ -n "${FARM_REDIS_PASSWORD:-}" ]]; then
    redis_auth=(--requirepass "$FARM_REDIS_PASSWORD")
    redis_userinfo=":${FARM_REDIS_PASSWORD}@"
fi
export FARM_REDIS_URL="redis://${redis_userinfo}${HEAD_HOST}:${FARM_REDIS_PORT}/0"
export FARM_API_URL="http://${HEAD_HOST}:${FARM_API_PORT}"

# appendfsync everysec: at most one second of acknowledged writes is lost if the node dies.
start_child redis "$FARM_EXEC" redis-server \
    --port "$FARM_REDIS_PORT" --bind "$FARM_BIND_HOST" --protected-mode no \
    --dir "$FARM_REDIS_DIR" --appendonly yes --appendfsync everysec --save "" \
    --maxmemory "$FARM_REDIS_MAXMEMORY" --maxmemory-policy noeviction \
    "${redis_auth[@]}"
until "$FARM_EXEC" redis-cli -u "$FARM_REDIS_URL" ping 2>/dev/null | grep -q PONG; do
    kill -0 "${CHILD_PIDS[0]}" 2>/dev/null || die "redis-server exited; see $FARM_LOG_DIR/redis.log"
    sleep 1
done
log "redis up at ${HEAD_HOST}:${FARM_REDIS_PORT} (AOF in $FARM_REDIS_DIR)"

ensure_api_token
start_child api "$FARM_EXEC" farm api --host "$FARM_BIND_HOST" --port "$FARM_API_PORT"
# Flower's /api needs auth or FLOWER_UNAUTHENTICATED_API; /metrics answers either way. Flower turns on
# task events in every worker unless told not to, which costs 15-25% throughput; worker liveness
# (flower_worker_online) comes from heartbeats and needs no task events.
: "${FARM_FLOWER_TASK_EVENTS:=false}"
flower_args=(--port="$FARM_FLOWER_PORT" --address="$FARM_BIND_HOST" --enable_events="$FARM_FLOWER_TASK_EVENTS")
[[ -n "${FARM_FLOWER_BASIC_AUTH:-}" ]] && flower_args+=(--basic-auth="$FARM_FLOWER_BASIC_AUTH")
start_child flower "$FARM_EXEC" celery -A farm flower "${flower_args[@]}"

wait_http "$FARM_API_URL/healthz" 120 || die "the API did not come up; see $FARM_LOG_DIR/api.log"
wait_http "http://${HEAD_HOST}:${FARM_FLOWER_PORT}/healthcheck" 120 ||
    log "warning: Flower does not answer; see $FARM_LOG_DIR/flower.log"

# Written last and atomically: its presence means the farm accepts workers and backends.
tmp="$HEAD_ENV_FILE.$$"
{
    printf 'FARM_HEAD_HOST=%q\n' "$HEAD_HOST"
    printf 'FARM_REDIS_URL=%q\n' "$FARM_REDIS_URL"
    printf 'FARM_API_URL=%q\n' "$FARM_API_URL"
    printf 'FARM_API_TOKEN=%q\n' "${FARM_API_TOKEN:-}"
    printf 'FARM_HEAD_JOB_ID=%q\n' "${SLURM_JOB_ID:-}"
} >"$tmp"
chmod 600 "$tmp"
mv "$tmp" "$HEAD_ENV_FILE"
log "farm head ready: API $FARM_API_URL, Flower http://${HEAD_HOST}:${FARM_FLOWER_PORT}"

# Redis stops last, after the API and Flower have let go of it.
STOP_IN_ORDER=1 supervise
