-- Claims a key in one step. KEYS[1]: the record. ARGV: key text, tool,
-- fingerprint (hex), owner (hex), lease ms, retention ms, mark ('1' when the
-- caller listens for wake-ups). Returns one of:
--   {'claimed', fence, taken_over}   the caller holds the claim
--   {'inflight', lease_left_ms}      held by another caller for the same request
--   {'completed', state, result, completed_at_ms}  state: done, failed, unknown
--   {'conflict_tool'}                another tool used the key
--   {'conflict_args', first_or_false} other arguments used the key
--   {'collision', stored_key}        another key shares the digest
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('HMGET', KEYS[1], 'key', 'tool', 'fingerprint', 'state', 'fence',
    'lease_until', 'ending', 'result', 'completed_at', 'owner', 'taken_over', 'finished_at')
-- A record written before the state had one word per value: state 'done',
-- how it ended in 'ending', and its time in 'finished_at'.
if r[4] == 'done' and r[7] then
    local legacy = {ok = 'done', err = 'failed', unknown = 'unknown'}
    r[4] = legacy[r[7]] or 'unknown'
    r[9] = r[9] or r[12]
end

-- A record is never without its state, so a key with none is new: there
-- is nothing left of an earlier claim to delete.
local function hold(fence, taken_over, new)
    local lease_until = now + tonumber(ARGV[5])
    redis.call('HSET', KEYS[1], 'key', ARGV[1], 'tool', ARGV[2], 'fingerprint', ARGV[3],
        'state', 'held', 'owner', ARGV[4], 'fence', fence, 'taken_over', taken_over,
        'lease_until', string.format('%.0f', lease_until))
    if not new then
        redis.call('HDEL', KEYS[1], 'ending', 'result', 'completed_at', 'finished_at', 'waiting')
    end
    redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', lease_until + tonumber(ARGV[6])))
    return {'claimed', fence, taken_over}
end

if not r[4] then
    return hold('1', '0', true)
end
if r[1] ~= ARGV[1] then
    return {'collision', r[1]}
end
if r[2] ~= ARGV[2] then
    return {'conflict_tool'}
end
local same = r[3] == ARGV[3]
if r[4] == 'held' then
    -- This caller's own claim, whose reply was lost: a retry of the same
    -- claim (same owner token) holds it, rather than waiting on itself.
    if r[10] == ARGV[4] then
        return {'claimed', r[5], r[11]}
    end
    if not same then
        return {'conflict_args', false}
    end
    local left = tonumber(r[6]) - now
    if left <= 0 then
        return hold(string.format('%.0f', tonumber(r[5]) + 1), '1', false)
    end
    if ARGV[7] == '1' then
        redis.call('HSET', KEYS[1], 'waiting', '1')
    end
    return {'inflight', string.format('%.0f', left)}
end
if not same then
    if r[4] == 'done' then
        return {'conflict_args', r[8]}
    end
    return {'conflict_args', false}
end
return {'completed', r[4], r[8], r[9]}
