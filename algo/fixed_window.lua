-- fixed window: mirrors fixedwindow.go. Appended to common.lua.
--
-- The value is struct-packed little-endian doubles, (start, count) per
-- rule: start is the window's first µs (a multiple of W, windows aligned
-- to the Unix epoch), count the units admitted in it. A missing or
-- differently sized value is idle: every count zero.

local format = '<' .. string.rep('d', 2 * n)
local start, count, t = {}, {}, {}
local packed = redis.call('GET', key)
if packed and #packed == 16 * n then
  local v = { struct.unpack(format, packed) }
  for i = 1, n do
    start[i], count[i] = v[2 * i - 1], v[2 * i]
  end
else
  for i = 1, n do
    start[i], count[i] = 0, 0
  end
end

-- roll: move to the window that holds now; a clock behind the stored
-- window is taken as at its start.
for i = 1, n do
  t[i] = max_of(now, start[i])
  local s = t[i] - t[i] % win[i]
  if s ~= start[i] then
    start[i], count[i] = s, 0
  end
end

local allowed = true
local cost = 0
if op ~= 'a' then -- decideFixedWindow; 'd' counts a denied cost too
  cost = amount
  for i = 1, n do
    if count[i] + cost > burst[i] then
      allowed = false
    end
  end
  if allowed or op == 'd' then
    for i = 1, n do
      count[i] = add_count(count[i], cost)
    end
  end
else -- adjustFixedWindow
  for i = 1, n do
    count[i] = add_count(count[i], amount)
    if count[i] > burst[i] then
      allowed = false
    end
  end
end

-- fixedWindowReport
local out_retry, out_rem, out_reset = {}, {}, {}
local retry, idle = 0, 0
for i = 1, n do
  out_rem[i] = max_of(0, burst[i] - count[i])
  out_reset[i] = 0
  out_retry[i] = 0
  if count[i] > 0 then
    out_reset[i] = start[i] + win[i] - t[i]
    idle = max_of(idle, start[i] + win[i])
  end
  if count[i] + cost > burst[i] then
    out_retry[i] = start[i] + win[i] - t[i] -- the next window starts empty
  end
  retry = max_of(retry, out_retry[i])
end

local state = {}
for i = 1, n do
  state[2 * i - 1], state[2 * i] = start[i], count[i]
end
redis.call('SET', key, struct.pack(format, unpack(state)), 'PX', expiry_ms(idle))
return pick(allowed, out_retry, out_rem, out_reset, retry, 0)
