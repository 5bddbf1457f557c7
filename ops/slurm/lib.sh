#!/usr/bin/env bash
# Helpers shared by the per-node scripts. Source it; do not run it.
#
# Every farm process runs either inside the Apptainer image ($FARM_IMAGE set) or from a Python
# environment that already has `pip install rollout-farm` ($FARM_VENV, or whatever is on PATH).

# shellcheck disable=SC2034  # variables here are read by the scripts that source this file

FARM_OPS_ENV="${FARM_OPS_ENV:-}"
if [[ -n "$FARM_OPS_ENV" ]]; then
    # Exported, so the farm's own processes (FARM_API_TOKEN, FARM_RESULT_TTL_S, ...) see them too.
    set -a
    # shellcheck source=/dev/null
    source "$FARM_OPS_ENV"
    set +a
fi

: "${FARM_SHARED_DIR:=$HOME/rollout-farm}"      # on a filesystem every node sees
: "${FARM_BIND_HOST:=0.0.0.0}"                   # interface servers listen on
: "${FARM_REDIS_PORT:=6379}"
: "${FARM_API_PORT:=8000}"
: "${FARM_FLOWER_PORT:=5555}"
: "${FARM_STOP_GRACE_S:=90}"                    # warm shutdown budget before SIGKILL
: "${FARM_HEAD_WAIT_S:=600}"                    # how long nodes wait for the head to come up
: "${FARM_LOG_DIR:=$FARM_SHARED_DIR/logs/${SLURM_JOB_ID:-local}/${SLURMD_NODENAME:-$(hostname -s)}}"
HEAD_ENV_FILE="$FARM_SHARED_DIR/head.env"
API_TOKEN_FILE="$FARM_SHARED_DIR/api-token"

log() {
    printf '%s [%s] %s\n' "$(date -u +%H:%M:%S)" "${SLURMD_NODENAME:-$(hostname -s)}" "$*" >&2
}

die() {
    log "error: $*"
    exit 1
}

FARM_EXEC="$FARM_OPS_DIR/farm-exec"   # image / venv / PATH dispatch, see that file
LLM_EXEC="$FARM_OPS_DIR/llm-exec"

wait_http() {
    # wait_http URL SECONDS [curl args...]: until URL answers below 500.
    local url="$1" budget="$2" deadline code
    shift 2
    deadline=$((SECONDS + budget))
    while ((SECONDS < deadline)); do
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$@" "$url" || true)
        if [[ "$code" =~ ^[1-4][0-9][0-9]$ ]]; then
            return 0
        fi
        sleep 2
    done
    return 1
}

api_auth_args() {
    if [[ -n "${FARM_API_TOKEN:-}" ]]; then
        printf '%s\n' -H "Authorization: Bearer $FARM_API_TOKEN"
    fi
}

# The API listens on $FARM_BIND_HOST; beyond loopback `farm api` refuses to start without a bearer token.
# Without FARM_API_TOKEN the head creates one in $API_TOKEN_FILE (0600, kept across head restarts) and
# hands it to every node through head.env (0600 too); clients send `Authorization: Bearer <token>`.
ensure_api_token() {
    [[ -n "${FARM_API_TOKEN:-}" ]] && return 0
    case "$FARM_BIND_HOST" in 127.* | localhost | ::1) return 0 ;; esac
    if [[ ! -s "$API_TOKEN_FILE" ]]; then
        if ! (umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$API_TOKEN_FILE.$$"); then
            die "cannot write $API_TOKEN_FILE"
        fi
        mv "$API_TOKEN_FILE.$$" "$API_TOKEN_FILE"
    fi
    FARM_API_TOKEN="$(<"$API_TOKEN_FILE")"
    export FARM_API_TOKEN
    log "API bearer token in $API_TOKEN_FILE (the API listens on $FARM_BIND_HOST)"
}

# Read where the head runs (written by head.sh) and wait until its API answers.
load_head_env() {
    local deadline=$((SECONDS + FARM_HEAD_WAIT_S))
    until [[ -s "$HEAD_ENV_FILE" ]]; do
        ((SECONDS < deadline)) || die "no $HEAD_ENV_FILE after ${FARM_HEAD_WAIT_S}s: is the head job running?"
        sleep 3
    done
    # shellcheck source=/dev/null
    source "$HEAD_ENV_FILE"
    export FARM_REDIS_URL FARM_API_URL FARM_API_TOKEN
    wait_http "$FARM_API_URL/healthz" "$FARM_HEAD_WAIT_S" ||
        die "the API at $FARM_API_URL does not answer (stale $HEAD_ENV_FILE?)"
}

CHILD_PIDS=()

start_child() {
    # start_child NAME CMD...: runs CMD (an executable, not a shell function) in its own process
    # group, output appended to $FARM_LOG_DIR/NAME.log. The recorded pid is CMD's own.
    local name="$1"
    shift
    mkdir -p "$FARM_LOG_DIR"
    setsid "$@" >>"$FARM_LOG_DIR/$name.log" 2>&1 </dev/null &
    CHILD_PIDS+=("$!")
    log "started $name (pid $!): $*"
}

# SIGTERM to each child's main process (Celery: warm shutdown, uvicorn: graceful), newest first;
# after the grace, SIGKILL to its whole process group (pool children, tool processes).
# With STOP_IN_ORDER=1 each child is stopped only after the newer ones have exited.
stop_children() {
    local pid deadline i
    trap - TERM INT
    deadline=$((SECONDS + FARM_STOP_GRACE_S))
    for ((i = ${#CHILD_PIDS[@]} - 1; i >= 0; i--)); do
        pid="${CHILD_PIDS[i]}"
        kill -TERM "$pid" 2>/dev/null || true
        if [[ "${STOP_IN_ORDER:-0}" == 1 ]]; then
            wait_or_kill "$pid" "$deadline"
        fi
    done
    for pid in "${CHILD_PIDS[@]}"; do
        wait_or_kill "$pid" "$deadline"
    done
    wait 2>/dev/null || true
}

wait_or_kill() {
    local pid="$1" deadline="$2"
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
        sleep 1
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
}

# Block until a child exits (then stop the rest) or a signal arrives.
supervise() {
    trap 'log "signal: stopping"; stop_children; exit 0' TERM INT
    local status=0
    wait -n || status=$?
    log "a child exited (status $status): stopping the node"
    stop_children
    return "$status"
}
