-- Removes a completed record or a claim whose lease ran out, or anything
-- when forced, waking the waiters of a removed claim. KEYS[1]: the record.
-- ARGV: '1' to force, wake channel, key digest. Returns 1 if removed, 0 if
-- there was nothing, -1 if a live claim was left.
local r = redis.call('HMGET', KEYS[1], 'state', 'lease_until')
if not r[1] then
    return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if r[1] ~= 'held' or tonumber(r[2]) <= now or ARGV[1] == '1' then
    redis.call('DEL', KEYS[1])
    if r[1] == 'held' then
        redis.call('PUBLISH', ARGV[2], ARGV[3])
    end
    return 1
end
return -1
