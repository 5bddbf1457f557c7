#!/usr/bin/env bash
# A GPU node: starts vLLM or SGLang servers (one per $FARM_LLM_TP GPUs), waits until each answers,
# then registers it with the farm (POST /add_llm_server {"address", "kind", "weight"}).
#
# There is no deregistration endpoint: when this node goes away its servers stay in the pool until
# a call to them fails, which marks them unhealthy (skipped, re-probed every few seconds). To drop
# them for good, POST /clear_llm_server and re-add the servers that remain (see ops/README.md).
set -euo pipefail
# shellcheck source=lib.sh
source "${FARM_OPS_DIR:?set FARM_OPS_DIR to the ops/slurm directory}/lib.sh"

: "${FARM_LLM_ENGINE:=vllm}"                     # vllm | sglang
: "${FARM_MODEL:?set FARM_MODEL to a model name or local path}"
: "${FARM_LLM_PORT:=8001}"                       # first server's port; the next ones count up
: "${FARM_LLM_WEIGHT:=1}"
: "${FARM_LLM_READY_WAIT_S:=1800}"               # model download + load + warm-up
: "${FARM_LLM_VENV:=}"                           # environment that has vllm / sglang installed
: "${FARM_LLM_IMAGE:=}"                          # or an Apptainer image of the engine (run with --nv)
export FARM_LLM_VENV FARM_LLM_IMAGE                # read by llm-exec
if [[ "$FARM_LLM_ENGINE" == vllm ]]; then
    # Tool calls for the gateway and logprobs as sampled (after temperature), as in compose/.
    : "${FARM_LLM_ARGS:=--enable-auto-tool-choice --tool-call-parser hermes --logprobs-mode processed_logprobs}"
else
    # Tool calls for the gateway in the Qwen/Hermes <tool_call> format (SGLang's parser of that name);
    # set FARM_LLM_ARGS for another model family (mistral, deepseekv3, ...).
    : "${FARM_LLM_ARGS:=--tool-call-parser qwen25}"
fi

HOST="${FARM_LLM_HOST:-$(hostname -f)}"

gpu_ids() {
    if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
        tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES"
    else
        nvidia-smi --query-gpu=index --format=csv,noheader
    fi
}
mapfile -t gpus < <(gpu_ids)
((${#gpus[@]} > 0)) || die "no GPUs visible on this node"
: "${FARM_LLM_TP:=${#gpus[@]}}"
((${#gpus[@]} % FARM_LLM_TP == 0)) || die "${#gpus[@]} GPUs do not split into servers of FARM_LLM_TP=$FARM_LLM_TP"
n_servers=$((${#gpus[@]} / FARM_LLM_TP))

server_command() {
    # server_command PORT: sets SERVER_CMD to the engine's command line for one server.
    local port="$1" extra=()
    read -r -a extra <<<"$FARM_LLM_ARGS"
    case "$FARM_LLM_ENGINE" in
    vllm)
        SERVER_CMD=(vllm serve "$FARM_MODEL" --host "$FARM_BIND_HOST" --port "$port"
            --tensor-parallel-size "$FARM_LLM_TP" "${extra[@]}")
        ;;
    sglang)
        SERVER_CMD=(python -m sglang.launch_server --model-path "$FARM_MODEL" --host "$FARM_BIND_HOST" --port "$port"
            --tp-size "$FARM_LLM_TP" "${extra[@]}")
        ;;
    *) die "FARM_LLM_ENGINE must be vllm or sglang, not '$FARM_LLM_ENGINE'" ;;
    esac
}

# The address the farm stores, as add_llm_server documents it (docs/CONTRACT.md): http://host:port/v1
# for both engines, with the kind saying which protocol the farm speaks. vLLM: /v1/completions (token
# in, token out) and /v1/chat/completions (the gateway). SGLang: /generate at the root (the farm strips
# the /v1, farm/inference/wire.py sglang_root) and /v1/chat/completions (the gateway; it also accepts a
# root address for kind sglang). The ready URL answers 200 once the server can generate (/health at the
# root of both engines; /v1/models answers while the engine still loads).
backend_address() { echo "http://$HOST:$1/v1"; }
ready_url() { echo "http://127.0.0.1:$1/health"; }

wait_ready() {
    # wait_ready URL PID: until URL answers 200, as long as the server process lives.
    local url="$1" pid="$2" deadline=$((SECONDS + FARM_LLM_READY_WAIT_S))
    while ((SECONDS < deadline)); do
        kill -0 "$pid" 2>/dev/null || return 1
        [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url" || true)" == 200 ]] && return 0
        sleep 5
    done
    return 1
}

register() {
    local address="$1" auth=()
    mapfile -t auth < <(api_auth_args)
    curl -sf --retry 5 --retry-delay 2 --retry-all-errors "${auth[@]}" \
        -H 'content-type: application/json' \
        -d "{\"address\": \"$address\", \"kind\": \"$FARM_LLM_ENGINE\", \"weight\": $FARM_LLM_WEIGHT}" \
        "$FARM_API_URL/add_llm_server" >/dev/null
}

load_head_env

ports=()
for ((i = 0; i < n_servers; i++)); do
    port=$((FARM_LLM_PORT + i))
    devices=$(IFS=','; echo "${gpus[*]:i*FARM_LLM_TP:FARM_LLM_TP}")
    server_command "$port"
    CUDA_VISIBLE_DEVICES="$devices" start_child "llm-$port" "$LLM_EXEC" "${SERVER_CMD[@]}"
    ports+=("$port")
done

for i in "${!ports[@]}"; do
    port="${ports[i]}"
    wait_ready "$(ready_url "$port")" "${CHILD_PIDS[i]}" ||
        { log "server on port $port never became ready; see $FARM_LOG_DIR/llm-$port.log"; stop_children; exit 1; }
    register "$(backend_address "$port")" || { log "registering port $port failed"; stop_children; exit 1; }
    log "registered $(backend_address "$port") ($FARM_LLM_ENGINE, GPUs of server $i) with $FARM_API_URL"
done

supervise
