"""Lua scripts that move a job through its states atomically (shared by the sync and async stores)."""

TERMINAL = "local terminal = {done=true, failed=true, cancelled=true, timeout=true}\n"

# KEYS: job, active, by_state   ARGV: job_id, spec json, task_ids json, now, ttl, timeout_s
CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'spec', ARGV[2], 'task_ids', ARGV[3], 'state', 'queued',
           'created_at', ARGV[4], 'enqueued_at', ARGV[4], 'timeout_s', ARGV[6])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[3], 'queued', 1)
return 1
"""

# KEYS: job, by_state, revoked   ARGV: stage, now, job_id
# One round trip at the start of every stage. Returns {verdict, flat hash}:
#   missing | terminal | done (stage finished before: a redelivery) | revoked | expired (budget spent)
#   | go (the job is now in `stage`; queue time up to now has been added to t_queued).
BEGIN_STAGE = (
    TERMINAL
    + """
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur then return {'missing', {}} end
if terminal[cur] then return {'terminal', {}} end
if redis.call('HGET', KEYS[1], 'done:' .. ARGV[1]) == '1' then return {'done', {}} end
if redis.call('ZSCORE', KEYS[3], ARGV[3]) then return {'revoked', redis.call('HGETALL', KEYS[1])} end
local used = 0
for _, stage in ipairs({'init', 'run', 'eval'}) do
  used = used + (tonumber(redis.call('HGET', KEYS[1], 't_' .. stage)) or 0)
end
if used >= tonumber(redis.call('HGET', KEYS[1], 'timeout_s')) then
  return {'expired', redis.call('HGETALL', KEYS[1])}
end
if cur ~= ARGV[1] then
  redis.call('HSET', KEYS[1], 'state', ARGV[1])
  redis.call('HINCRBY', KEYS[2], cur, -1)
  redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
end
local enq = redis.call('HGET', KEYS[1], 'enqueued_at')
if enq then
  local waited = tonumber(ARGV[2]) - tonumber(enq)
  if waited > 0 then redis.call('HINCRBYFLOAT', KEYS[1], 't_queued', waited) end
  redis.call('HDEL', KEYS[1], 'enqueued_at')
end
return {'go', redis.call('HGETALL', KEYS[1])}
"""
)

# KEYS: job, active, by_state, stats   ARGV: job_id, state, result json, ttl, now, channel, only_from
# only_from: when not empty, finalize only if the job is in that state (the API ends queued jobs only).
FINALIZE = (
    TERMINAL
    + """
local cur = redis.call('HGET', KEYS[1], 'state')
if not cur or terminal[cur] then return 0 end
if ARGV[7] ~= '' and cur ~= ARGV[7] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'result', ARGV[3], 'finished_at', ARGV[5])
redis.call('HDEL', KEYS[1], 'enqueued_at')
redis.call('HINCRBY', KEYS[3], cur, -1)
redis.call('HINCRBY', KEYS[3], ARGV[2], 1)
redis.call('HINCRBY', KEYS[4], 'jobs_total:' .. ARGV[2], 1)
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('PUBLISH', ARGV[6], ARGV[1])
return 1
"""
)
