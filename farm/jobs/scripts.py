"""Lua scripts that move a job through its states atomically (shared by the sync and async stores).

Leases and fencing. A stage that starts takes the job's lease: a fencing token (the job's `attempt`
counter, incremented on every take) and an expiry that the running worker renews every few seconds.
Writes that end a stage or the job carry the token and are refused once it is stale, so an attempt
that lost its lease (its worker was presumed dead and the stage was re-enqueued) can never write.
While a lease is live, a second delivery of the same stage (Celery redelivery, a duplicate) is
refused at the door, so no stage ever runs twice at once.

Keys. Every script gets every key it touches in KEYS[] (farm/keys.py names them; a job's keys share
its bucket's hash tag, so a script's keys lie in one cluster slot). A READY slot set (`farm:ready:
<node>`) is per node, not per job, so no job script touches one: a script that ends a job's hold on
its slot clears `ready_node` and returns the node, and the store removes the member right after
(farm/jobs/store.py). Field names are farm/keys.py's JobField (tests/core/test_key_literals.py).
A stage message is pushed by the script when its queue list is given as the last key (the broker is
this Redis); with a broker elsewhere the store pushes it after the script.

Cost. Every command a script runs counts (bench/redis_cost.py), so the hot path writes little: a state
change is one HINCRBY of its transition (`from>to`) in the bucket's `by_state` hash, from which the
store derives jobs per state, finished jobs and stage runs (`queued` is the active set minus the jobs
in a stage, so creating a job counts nothing); a field that ends its use is overwritten with '' in
the HSET the script does anyway instead of a separate HDEL; revocation is a field of the job's hash,
read with the rest of it.
"""

TRANSITION = ">"
"""`by_state` field of a state change: `init>run` (farm/jobs/store.py reads them back as counts)."""

TERMINAL = "local terminal = {done=true, failed=true, cancelled=true, timeout=true}\n"

_CLEAR_LEASE = """
local function clear_lease(job_key, leases_key, job_id)
  redis.call('HDEL', job_key, 'lease_token', 'lease_expires', 'lease_owner', 'lease_stage', 'lease_started')
  redis.call('ZREM', leases_key, job_id)
end
"""

# Clears the job's READY slot field; returns the node whose set still lists it ('' if none).
_DROP_READY = """
local function drop_ready(job_key)
  local node = redis.call('HGET', job_key, 'ready_node')
  if node and node ~= '' then
    redis.call('HSET', job_key, 'ready_node', '')
    return node
  end
  return ''
end
"""

# KEYS: job, active[, jobs index][, init queue list]
# ARGV: job_id, spec json, task_ids json, now, ttl, timeout_s, callback_url, init message, index given
# With the queue list given, the job and its init message exist together or not at all
# (farm/jobs/messages.py). The viewer's index is written here on a plain Redis; on a cluster it lies in
# another slot and the caller writes it.
CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'spec', ARGV[2], 'task_ids', ARGV[3], 'state', 'queued',
           'created_at', ARGV[4], 'enqueued_at', ARGV[4], 'timeout_s', ARGV[6], 'attempt', 0)
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'callback_url', ARGV[7]) end
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('SADD', KEYS[2], ARGV[1])
if ARGV[9] == '1' then
  redis.call('ZADD', KEYS[3], 'NX', ARGV[4], ARGV[1])
  if KEYS[4] then redis.call('LPUSH', KEYS[4], ARGV[8]) end
elseif KEYS[3] then
  redis.call('LPUSH', KEYS[3], ARGV[8])
end
return 1
"""

_HASH_TABLE = """
local function hash_table(flat)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end
local function flat_hash(t)
  local out = {}
  for k, v in pairs(t) do
    out[#out + 1] = k
    out[#out + 1] = v
  end
  return out
end
"""

# KEYS: job, by_state, leases   ARGV: stage, now, job_id, owner, lease_ttl
# One round trip at the start of every stage. Returns {verdict, flat hash, token, ready node}:
#   missing | terminal | done (the stage finished before: a redelivery) | leased (a live attempt
#   runs it) | revoked | expired (budget spent) | go (the job is now in `stage`, this attempt holds
#   the lease with `token`, and queue time up to now has been added to t_queued). A run that starts
#   gives the job's READY slot back: the node whose set lists it, or ''.
# The hash is read once and written once (every stage start runs this: commands are its cost).
BEGIN_STAGE = (
    TERMINAL
    + _HASH_TABLE
    + """
local flat = redis.call('HGETALL', KEYS[1])
local job = hash_table(flat)
local cur = job['state']
if not cur then return {'missing', {}, 0, ''} end
if terminal[cur] then return {'terminal', {}, 0, ''} end
if job['done:' .. ARGV[1]] == '1' then return {'done', {}, 0, ''} end
local now = tonumber(ARGV[2])
if (tonumber(job['lease_expires']) or 0) > now then return {'leased', {}, 0, ''} end
if job['revoked'] then return {'revoked', flat, 0, ''} end
local used = (tonumber(job['t_init']) or 0) + (tonumber(job['t_run']) or 0) + (tonumber(job['t_eval']) or 0)
if used >= tonumber(job['timeout_s']) then return {'expired', flat, 0, ''} end
local token = (tonumber(job['attempt']) or 0) + 1
local expires = now + tonumber(ARGV[5])
job['attempt'] = tostring(token)
job['lease_token'] = tostring(token)
job['lease_expires'] = tostring(expires)
job['lease_owner'] = ARGV[4]
job['lease_stage'] = ARGV[1]
job['lease_started'] = ARGV[2]
job['state'] = ARGV[1]
local set = {'attempt', job['attempt'], 'lease_token', job['lease_token'], 'lease_expires',
             job['lease_expires'], 'lease_owner', ARGV[4], 'lease_stage', ARGV[1], 'lease_started', ARGV[2],
             'state', ARGV[1]}
local function put(field, value)
  job[field] = value
  set[#set + 1] = field
  set[#set + 1] = value
end
if (job['enqueued_at'] or '') ~= '' then
  local waited = now - tonumber(job['enqueued_at'])
  if waited > 0 then put('t_queued', tostring((tonumber(job['t_queued']) or 0) + waited)) end
  put('enqueued_at', '')
end
local ready = ''
if ARGV[1] == 'run' and (job['ready_node'] or '') ~= '' then
  ready = job['ready_node']
  put('ready_node', '')
end
redis.call('HSET', KEYS[1], unpack(set))
redis.call('ZADD', KEYS[3], expires, ARGV[3])
if cur ~= ARGV[1] then redis.call('HINCRBY', KEYS[2], cur .. '>' .. ARGV[1], 1) end
return {'go', flat_hash(job), token, ready}
"""
)

# KEYS: leases, job 1, job 2, ...   ARGV: expires, then token, job_id of each job in KEYS order.
# Renews the leases of a worker's jobs (of one bucket) in one round trip; returns the ids of the jobs
# whose lease is no longer ours.
RENEW = """
local lost = {}
for i = 2, #KEYS do
  local token, job_id = ARGV[2 * i - 2], ARGV[2 * i - 1]
  if redis.call('HGET', KEYS[i], 'lease_token') == token then
    redis.call('HSET', KEYS[i], 'lease_expires', ARGV[1])
    redis.call('ZADD', KEYS[1], ARGV[1], job_id)
  else
    lost[#lost + 1] = job_id
  end
end
return lost
"""

# KEYS: job, stats, leases[, next stage's queue list]
# ARGV: token, stage, elapsed, now, job_id, next stage's message, field1, value1, ...
# Fenced: records the stage's time and outputs, marks it done, gives the lease back and enqueues the next
# stage, all at once (so no crash can leave a finished stage with no next one); `enqueued_at` starts the
# next stage's queue time.
END_STAGE = """
local held = redis.call('HMGET', KEYS[1], 'lease_token', 't_' .. ARGV[2])
if held[1] ~= ARGV[1] then return 0 end
local set = {'t_' .. ARGV[2], tostring((tonumber(held[2]) or 0) + tonumber(ARGV[3])),
             'done:' .. ARGV[2], '1', 'enqueued_at', ARGV[4], 'lease_token', '', 'lease_expires', '0'}
for i = 7, #ARGV do set[#set + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(set))
redis.call('ZREM', KEYS[3], ARGV[5])
redis.call('HINCRBYFLOAT', KEYS[2], 'stage_seconds_sum:' .. ARGV[2], ARGV[3])
if KEYS[4] then redis.call('LPUSH', KEYS[4], ARGV[6]) end
return 1
"""

# KEYS: job, stats, leases   ARGV: token, job_id, now, restart_from_init ('1' or '')
# Fenced: gives the lease back without finishing the stage so that it can be sent again (a worker
# draining on shutdown). Counted as an infrastructure retry. Returns {retry count, READY node} or
# {0, ''} when the lease is not this attempt's.
RELEASE = (
    _CLEAR_LEASE
    + _DROP_READY
    + """
if redis.call('HGET', KEYS[1], 'lease_token') ~= ARGV[1] then return {0, ''} end
clear_lease(KEYS[1], KEYS[3], ARGV[2])
local ready = drop_ready(KEYS[1])
if ARGV[4] == '1' then redis.call('HDEL', KEYS[1], 'done:init', 'init_state', 'node') end
redis.call('HSET', KEYS[1], 'enqueued_at', ARGV[3])
redis.call('HINCRBY', KEYS[2], 'retries_total:infra', 1)
return {redis.call('HINCRBY', KEYS[1], 'infra_retries', 1), ready}
"""
)

# KEYS: job, leases, stats   ARGV: job_id, now
# Takes an expired lease away from its (presumed dead) holder: bumps the fencing token so a late write of
# the old attempt is refused. Returns {stage, infra_retries, node, READY node} when it did, else {}
# (the lease was renewed meanwhile, or given back: the index entry is updated or dropped).
REAP = (
    _CLEAR_LEASE
    + _DROP_READY
    + """
local held = redis.call('HMGET', KEYS[1], 'lease_expires', 'lease_stage', 'node', 'lease_token')
local expires = tonumber(held[1])
if expires == nil or (held[4] or '') == '' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return {}
end
if expires > tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[2], expires, ARGV[1])
  return {}
end
local ready = ''
if held[2] == 'init' then ready = drop_ready(KEYS[1]) end
redis.call('HINCRBY', KEYS[1], 'attempt', 1)
clear_lease(KEYS[1], KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'enqueued_at', ARGV[2])
redis.call('HINCRBY', KEYS[3], 'retries_total:infra', 1)
local retries = redis.call('HINCRBY', KEYS[1], 'infra_retries', 1)
return {held[2] or '', retries, held[3] or '', ready}
"""
)

# KEYS: job, active, by_state, stats, leases, callbacks
# ARGV: job_id, state, result json, ttl, now, done channel, only_from, token, callbacks-due channel
# only_from: when not empty, finalize only if the job is in that state (the API ends queued jobs only).
# token: when not empty, only the holder of the lease may end the job (fencing).
# Returns {1, READY node or ''} when it ended the job, {0, ''} when it had ended already or was refused.
FINALIZE = (
    TERMINAL
    + """
local held = redis.call('HMGET', KEYS[1], 'state', 'lease_token', 'ready_node', 'callback_url',
                        'lease_stage', 'lease_started')
local cur = held[1]
if not cur or terminal[cur] then return {0, ''} end
if ARGV[7] ~= '' and cur ~= ARGV[7] then return {0, ''} end
if ARGV[8] ~= '' and held[2] ~= ARGV[8] then return {0, ''} end
if ARGV[8] ~= '' and held[5] and held[6] then
  -- The stage that ends the job (eval, or one that failed) counts like a stage that handed off.
  local elapsed = math.max(0, tonumber(ARGV[5]) - tonumber(held[6]))
  redis.call('HINCRBYFLOAT', KEYS[4], 'stage_seconds_sum:' .. held[5], tostring(elapsed))
end
-- The result holds what the stage outputs were for: keep the job's data once.
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'result', ARGV[3], 'finished_at', ARGV[5], 'enqueued_at', '',
           'lease_token', '', 'lease_expires', '0', 'ready_node', '', 'init_state', '', 'run_output', '')
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('HINCRBY', KEYS[3], cur .. '>' .. ARGV[2], 1)
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
if held[4] then
  redis.call('ZADD', KEYS[6], ARGV[5], ARGV[1])
  redis.call('PUBLISH', ARGV[9], ARGV[1])
end
redis.call('PUBLISH', ARGV[6], ARGV[1])
return {1, held[3] or ''}
"""
)

# KEYS: job, revoked   ARGV: job_id, now, keep_s
# Cancellation: the monitors of running stages poll the revoked set; a stage's start reads the field.
REVOKE = """
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], 0, tonumber(ARGV[2]) - tonumber(ARGV[3]))
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'revoked', '1') end
return 1
"""

# KEYS: job   ARGV: field, value[, field, value ...]
# A write to a job outside the stage scripts (a pin taken, the READY node): only while the job's hash
# exists, so a job that expired or was deleted meanwhile is not recreated as a stub without a TTL.
SET_IF_LIVE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""

# KEYS: job   ARGV: field, amount.  The same for a float counter (time a started stage spent queued).
ADD_IF_LIVE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBYFLOAT', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# KEYS: job, stats.  A stage sent again outside a script (the stall sweep): the job's infrastructure
# retries so far, or -1 if the job is gone.
COUNT_INFRA_RETRY = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('HINCRBY', KEYS[2], 'retries_total:infra', 1)
return redis.call('HINCRBY', KEYS[1], 'infra_retries', 1)
"""

# KEYS: ready set of a node   ARGV: job_id, now, limit
# The READY buffer's door: 2 when the job now takes one of the node's `limit` slots, 1 when it held one
# already, 0 when the node is full. (The store then records `ready_node` in the job's hash, and clears
# members whose job no longer holds the slot when the node looks full: farm/jobs/store.py.)
TAKE_READY_SLOT = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 2
"""
