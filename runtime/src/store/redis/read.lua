-- Reads one record for an operator. KEYS[1]: the record. Returns the
-- server's time in ms, the record's time to live in ms, then its fields
-- (false where absent): key, tool, state, owner, fence, taken_over,
-- lease_until, state word, result, completed_at, fingerprint. A record written before
-- the state had one word per value (state 'done', with 'ending' and
-- 'finished_at') is read in today's words.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('HMGET', KEYS[1], 'key', 'tool', 'state', 'owner', 'fence', 'taken_over',
    'lease_until', 'ending', 'result', 'completed_at', 'finished_at', 'fingerprint')
if r[3] == 'done' and r[8] then
    local legacy = {ok = 'done', err = 'failed', unknown = 'unknown'}
    r[3] = legacy[r[8]] or 'unknown'
    r[10] = r[10] or r[11]
end
r[8] = r[3]
return {string.format('%.0f', now), string.format('%.0f', redis.call('PTTL', KEYS[1])),
    r[1], r[2], r[3], r[4], r[5],
    r[6], r[7], r[8], r[9], r[10], r[12]}
