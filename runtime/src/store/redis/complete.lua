-- Completes the claim of this owner at this fence with its record.
-- KEYS[1]: the record. ARGV: owner, fence, state (done, failed or unknown),
-- result, completed_at ms,
-- retention ms, wake channel, key digest. Completing again with the same
-- owner and fence writes the same record (a retry after a lost reply).
-- Returns 0 if the claim is lost, 1 if recorded, 2 if recorded and a
-- waiter was woken.
local r = redis.call('HMGET', KEYS[1], 'owner', 'fence', 'waiting')
if r[1] ~= ARGV[1] or r[2] ~= ARGV[2] then
    return 0
end
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'result', ARGV[4], 'completed_at', ARGV[5])
redis.call('HDEL', KEYS[1], 'lease_until', 'waiting', 'ending', 'finished_at')
-- Kept for the retention from now, by the server's clock.
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if r[3] == '1' then
    redis.call('PUBLISH', ARGV[7], ARGV[8])
    return 2
end
return 1
