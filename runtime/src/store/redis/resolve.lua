-- Resolves an unknown outcome, or a claim whose lease ran out: as applied
-- it becomes 'done' with the provider's result, its time to live kept and
-- its fence bumped so that its holder's late completion changes nothing;
-- as not applied it goes. Wakes a resolved claim's waiters. KEYS[1]: the
-- record. ARGV: '1' if applied, the result, completed_at ms, wake channel,
-- key digest. Returns 1 if resolved, 0 if there was no record, -1 if a
-- live claim was left, 2 for a record that is done, 3 for one that failed.
local r = redis.call('HMGET', KEYS[1], 'state', 'lease_until', 'ending')
if not r[1] then
    return 0
end
local state = r[1]
if state == 'done' and r[3] then
    -- A record written before the state had one word per value.
    local legacy = {ok = 'done', err = 'failed', unknown = 'unknown'}
    state = legacy[r[3]] or 'unknown'
end
if state == 'held' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if tonumber(r[2]) > now then
        return -1
    end
elseif state == 'done' then
    return 2
elseif state == 'failed' then
    return 3
end
if ARGV[1] == '1' then
    redis.call('HSET', KEYS[1], 'state', 'done', 'result', ARGV[2], 'completed_at', ARGV[3])
    redis.call('HDEL', KEYS[1], 'lease_until', 'waiting', 'ending', 'finished_at')
    redis.call('HINCRBY', KEYS[1], 'fence', 1)
else
    redis.call('DEL', KEYS[1])
end
if state == 'held' then
    redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return 1
