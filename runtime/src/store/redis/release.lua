-- Gives up the claim of this owner at this fence. KEYS[1]: the record.
-- ARGV: owner, fence, wake channel, key digest. Returns 0 if the claim is
-- lost, 1 if released, 2 if released and a waiter was woken.
local r = redis.call('HMGET', KEYS[1], 'state', 'owner', 'fence', 'waiting')
if r[1] ~= 'held' or r[2] ~= ARGV[1] or r[3] ~= ARGV[2] then
    return 0
end
redis.call('DEL', KEYS[1])
if r[4] == '1' then
    redis.call('PUBLISH', ARGV[3], ARGV[4])
    return 2
end
return 1
