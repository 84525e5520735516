-- sliding window counter: mirrors slidingwindow.go. Appended to common.lua.
--
-- The value is struct-packed little-endian doubles, (start, prev, cur) per
-- rule: the current window's first µs (a multiple of W), the units
-- admitted in the window before it and in it. A missing or differently
-- sized value is idle: every count zero.

local format = '<' .. string.rep('d', 3 * n)
local start, prev, cur, t = {}, {}, {}, {}
local packed = redis.call('GET', key)
if packed and #packed == 24 * n then
  local v = { struct.unpack(format, packed) }
  for i = 1, n do
    start[i], prev[i], cur[i] = v[3 * i - 2], v[3 * i - 1], v[3 * i]
  end
else
  for i = 1, n do
    start[i], prev[i], cur[i] = 0, 0, 0
  end
end

-- roll: the current count becomes the previous one when the windows are
-- neighbours and is forgotten when they are not.
for i = 1, n do
  t[i] = max_of(now, start[i])
  local s = t[i] - t[i] % win[i]
  if s ~= start[i] then
    local p = 0
    if s - win[i] == start[i] then
      p = cur[i]
    end
    start[i], prev[i], cur[i] = s, p, 0
  end
end

-- estimate: prev × (1-f) + cur, f the fraction of the window gone.
local function estimate(i)
  return prev[i] * (win[i] - (t[i] - start[i])) / win[i] + cur[i]
end

-- wait: µs until a request of cost passes rule i (see slidingWindow.wait).
local function wait(i, cost)
  local el = t[i] - start[i]
  if cur[i] + cost <= burst[i] then
    return (win[i] - el) - (burst[i] - cur[i] - cost) * win[i] / prev[i]
  end
  local w = win[i] - el
  local extra = win[i] - (burst[i] - cost) * win[i] / cur[i]
  if extra > 0 then
    w = w + extra
  end
  return w
end

local allowed = true
local cost = 0
local est, over = {}, {}
if op == 'c' then -- decideSlidingWindow
  cost = amount
  for i = 1, n do
    est[i] = estimate(i)
    over[i] = est[i] + cost > burst[i] + tolerance
    if over[i] then
      allowed = false
    end
  end
  if allowed then
    for i = 1, n do
      cur[i] = cur[i] + cost
      est[i] = est[i] + cost
    end
  end
else -- adjustSlidingWindow
  for i = 1, n do
    cur[i] = add_count(cur[i], amount)
    est[i] = estimate(i)
    over[i] = est[i] > burst[i] + tolerance
    if over[i] then
      allowed = false
    end
  end
end

-- slidingWindowReport
local out_retry, out_rem, out_reset = {}, {}, {}
local retry, idle = 0, 0
for i = 1, n do
  local el = t[i] - start[i]
  out_rem[i] = remaining(burst[i] - est[i])
  out_reset[i] = 0
  if cur[i] > 0 then
    out_reset[i] = 2 * win[i] - el -- until the current window has faded too
  elseif prev[i] > 0 then
    out_reset[i] = win[i] - el
  end
  out_retry[i] = 0
  if over[i] then
    out_retry[i] = ceil_micros(wait(i, cost))
  end
  retry = max_of(retry, out_retry[i])
  idle = max_of(idle, t[i] + out_reset[i])
end

local state = {}
for i = 1, n do
  state[3 * i - 2], state[3 * i - 1], state[3 * i] = start[i], prev[i], cur[i]
end
redis.call('SET', key, struct.pack(format, unpack(state)), 'PX', expiry_ms(idle))
return pick(allowed, out_retry, out_rem, out_reset, retry, 0)
