-- The shared TLS session-ticket key set of one rotation period (cluster.shareTicketKeys).
-- KEYS[1]: the set's key. ARGV[1]: rotation, ms. ARGV[2..4]: fresh key material (hex), used
-- only when the set is created or shifted.
-- The set is `epoch:previous:current:next` (epoch = Redis TIME / rotation). Whoever finds none
-- creates it; whoever finds it behind the current epoch shifts it (next becomes current, current
-- previous, a fresh next), all in this one atomic call, so every node reads the same keys.
-- Returns the set; it expires three rotations after the last node asked for it.
local rot = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = math.floor(now / rot)
local fresh = { ARGV[2], ARGV[3], ARGV[4] }
local e, p, c, n
local v = redis.call('GET', KEYS[1])
if v then
  e, p, c, n = string.match(v, '^(%d+):(%x*):(%x+):(%x+)$')
end
if e then
  e = tonumber(e)
  local i = 1
  while e < epoch and i <= 3 do
    p, c, n = c, n, fresh[i]
    e = e + 1
    i = i + 1
  end
  if e < epoch then
    p = ''
    e = epoch
  end
else
  e, p, c, n = epoch, '', fresh[1], fresh[2]
end
local out = string.format('%d:%s:%s:%s', e, p, c, n)
redis.call('SET', KEYS[1], out, 'PX', rot * 3)
return out
