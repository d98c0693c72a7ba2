-- Renews the lease of this owner at this fence. KEYS[1]: the record.
-- ARGV: owner, fence, lease ms, retention ms. Returns 0 if the claim is
-- lost, 1 if renewed.
local r = redis.call('HMGET', KEYS[1], 'state', 'owner', 'fence')
if r[1] ~= 'held' or r[2] ~= ARGV[1] or r[3] ~= ARGV[2] then
    return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_until = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'lease_until', string.format('%.0f', lease_until))
redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', lease_until + tonumber(ARGV[4])))
return 1
