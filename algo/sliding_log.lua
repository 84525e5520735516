-- sliding log: mirrors slidinglog.go. Appended to common.lua.
--
-- The key is a sorted set with one member per admitted unit, scored by its
-- time in Unix µs. The members at one score are "<time>:<seq>" with seq
-- 0, 1, 2, ... (zero-padded, so that ZPOPMAX, which takes the greatest
-- member among equal scores, always takes the last seq): unique without a
-- counter kept elsewhere. One log serves every rule of the key, since a
-- request is admitted by all of them or by none.

-- newest returns the time of the newest entry, or nil.
local function newest()
  local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if e[2] then
    return tonumber(e[2])
  end
  return nil
end

-- prepare: a clock behind the newest entry sees the log as of then; drop
-- what is older than every rule's window.
local t = now
local last = newest()
if last and last > t then
  t = last
end
local wmax = 0
for i = 1, n do
  wmax = max_of(wmax, win[i])
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(t - wmax))

local out_retry, out_rem, out_reset = {}, {}, {}

-- outcomes: per rule, the units in (t-W, t]; a rule refusing cost must
-- see the k = used + cost - burst oldest of them leave, the k-th at e + W.
local function outcomes(cost)
  local retry, ok = 0, true
  local latest = newest()
  for i = 1, n do
    local from = '(' .. fmt(t - win[i])
    local used = redis.call('ZCOUNT', key, from, '+inf')
    out_rem[i] = max_of(0, burst[i] - used)
    out_reset[i], out_retry[i] = 0, 0
    if used > 0 then
      out_reset[i] = latest + win[i] - t
    end
    local k = used + cost - burst[i]
    if k > 0 then
      ok = false
      local e = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
      out_retry[i] = tonumber(e[2]) + win[i] - t
      retry = max_of(retry, out_retry[i])
    end
  end
  return retry, ok
end

-- add logs units entries at t, in chunks that stay within Lua's stack.
local function add(units)
  local seq = redis.call('ZCOUNT', key, fmt(t), fmt(t))
  local stamp = fmt(t)
  local j = 0
  while j < units do
    local args = {}
    for _ = 1, math.min(500, units - j) do
      args[#args + 1] = stamp
      args[#args + 1] = stamp .. ':' .. string.format('%010d', seq + j)
      j = j + 1
    end
    redis.call('ZADD', key, unpack(args))
  end
end

local allowed, retry
if op == 'c' then -- decideSlidingLog
  retry, allowed = outcomes(amount)
  if allowed then
    add(amount)
    outcomes(0) -- what is left after it
  end
else -- adjustSlidingLog
  if amount > 0 then
    add(amount)
  elseif amount < 0 then
    redis.call('ZPOPMAX', key, fmt(math.min(-amount, max_us))) -- a count Redis reads
  end
  retry, allowed = outcomes(0)
end

-- idle once every entry has left every window; set on every path that
-- leaves a log (an empty log is no key).
local latest = newest()
if latest then
  redis.call('PEXPIRE', key, expiry_ms(latest + wmax))
end
return pick(allowed, out_retry, out_rem, out_reset, retry, 0)
