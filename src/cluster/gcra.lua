-- Rampart clusterRateLimit: one client's GCRA over every node, in one atomic step.
-- KEYS[1]  the client's key (its TAT, microseconds of Redis TIME)
-- ARGV[1]  emission interval T, us (1e6 / connectionsPerSecond)
-- ARGV[2]  tolerance tau, us (T * (burst - 1))
-- ARGV[3]  credit to charge: connections a node already admitted on credit
-- ARGV[4]  tokens wanted (the lease)
-- Returns { granted, retry_after_us }: granted tokens are charged now; with none granted,
-- retry_after_us is the time until one would conform. Redis TIME is the clock, so the nodes'
-- clocks never matter. The key expires once its TAT is in the past (then it equals a fresh one).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local T = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local charge = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
tat = tat + charge * T
local granted = 0
if tat <= now + tau then
  granted = math.min(want, math.floor((now + tau - tat) / T) + 1)
  tat = tat + granted * T
end
local retry = 0
if granted == 0 then retry = tat - tau - now end
if tat > now then
  redis.call('SET', KEYS[1], tat, 'PX', math.ceil((tat - now) / 1000) + 1000)
end
return { granted, retry }
