-- leaky bucket (a shaper): mirrors leakybucket.go. Appended to common.lua.
--
-- The value is struct-packed little-endian doubles, one per rule: the
-- time (Unix µs, fractional) at which the rule's queue is empty. A missing
-- or differently sized value is every queue empty.

local format = '<' .. string.rep('d', n)
local nxt = {}
local packed = redis.call('GET', key)
if packed and #packed == 8 * n then
  nxt = { struct.unpack(format, packed) }
  nxt[n + 1] = nil -- struct.unpack also returns the next position
else
  for i = 1, n do
    nxt[i] = 0
  end
end

local allowed = true
local out_retry, out_rem, out_reset = {}, {}, {}
local retry, delay = 0, 0
if op == 'c' then -- decideLeakyBucket
  local cost = amount
  local d = 0 -- µs until the request's turn: the longest queue ahead
  for i = 1, n do
    d = max_of(d, nxt[i] - now)
  end
  allowed = max_delay <= 0 or d <= max_delay
  for i = 1, n do
    if d * rate[i] / 1e6 + cost > burst[i] + tolerance then
      allowed = false
    end
    -- room for cost again once the wait has fallen to (burst - cost)/rate
    out_retry[i] = ceil_micros(d - (burst[i] - cost) * 1e6 / rate[i])
    retry = max_of(retry, out_retry[i])
  end
  if max_delay > 0 then
    retry = max_of(retry, ceil_micros(d - max_delay))
  end
  if allowed and cost > 0 then
    for i = 1, n do
      nxt[i] = now + d + cost * 1e6 / rate[i]
    end
    delay = ceil_micros(d)
  end
else -- adjustLeakyBucket
  for i = 1, n do
    nxt[i] = max_of(now, max_of(now, nxt[i]) + amount * 1e6 / rate[i])
    local q = nxt[i] - now
    out_retry[i] = 0
    if q * rate[i] / 1e6 > burst[i] + tolerance then
      allowed = false
      out_retry[i] = ceil_micros(q - burst[i] * 1e6 / rate[i])
      retry = max_of(retry, out_retry[i])
    end
  end
end

-- leakyBucketReport
local idle = now
for i = 1, n do
  local q = max_of(0, nxt[i] - now)
  out_rem[i] = remaining(burst[i] - q * rate[i] / 1e6)
  out_reset[i] = ceil_micros(q)
  idle = max_of(idle, now + out_reset[i])
end

redis.call('SET', key, struct.pack(format, unpack(nxt)), 'PX', expiry_ms(idle))
return pick(allowed, out_retry, out_rem, out_reset, retry, delay)
