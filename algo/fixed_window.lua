-- fixed window: the windows' state step of fixedwindow.go (roll, decide,
-- count) for a batch of checks and adjustments, one after the other in
-- the order given. It does only what needs Redis: the Go client computes
-- the windows beforehand and each Result afterwards, from the state this
-- returns (fixedWindowReport), so the report has one definition.
--
-- KEYS[k]  the key of op k's caller (a key may come more than once)
-- ARGV[1]  now in Unix microseconds, or "" to use the Redis server's TIME
-- ARGV[2]  expiry margin in milliseconds
-- then per op: kind ("c" check, "d" check that counts a denied cost too,
--          "a" adjust), amount (cost or delta), the number of rules n,
--          and n pairs of window W (µs) and burst
--
-- Returns per op: allowed (0|1), then per rule t (now, clamped to the
-- stored window), start and count after the op.
--
-- The value is struct-packed little-endian doubles, (start, count) per
-- rule; one of another size is none. Times and counts are whole numbers
-- below 2^53 held in doubles, so the arithmetic is exact. State whose
-- counts are all zero is as good as none (its idle time has passed, as the
-- in-memory store drops it): it is deleted, never stored.

local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(now)
end
local margin_ms = tonumber(ARGV[2])
local max_us = 9007199254740992 -- 2^53: a count saturates there (addCount)

-- The tables are reused from op to op; a key of one rule, the common
-- case, is read and written without a table of its own.
local w, burst, t, st = {}, {}, {}, {}
local out, o, a = {}, 0, 3
for k = 1, #KEYS do
  local key, kind, amount, n = KEYS[k], ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  for i = 1, n do
    w[i], burst[i] = tonumber(ARGV[a + 1 + 2 * i]), tonumber(ARGV[a + 2 + 2 * i])
    st[2 * i - 1], st[2 * i] = 0, 0 -- start and count: none
  end
  a = a + 3 + 2 * n
  local format = n == 1 and '<dd' or '<' .. string.rep('d', 2 * n)
  local v = redis.call('GET', key)
  if v and #v == 16 * n then
    if n == 1 then
      st[1], st[2] = struct.unpack(format, v)
    else
      local u = { struct.unpack(format, v) }
      for j = 1, 2 * n do
        st[j] = u[j]
      end
    end
    local idle = 0
    for i = 1, n do
      if st[2 * i] > 0 and st[2 * i - 1] + w[i] > idle then
        idle = st[2 * i - 1] + w[i]
      end
    end
    if idle <= now then -- idle state is none, as the in-memory store has it
      for j = 1, 2 * n do
        st[j] = 0
      end
    end
  end
  local allowed, changed = true, false
  for i = 1, n do
    local start, count = st[2 * i - 1], st[2 * i]
    -- roll: a clock behind the stored window is taken as at its start
    t[i] = start > now and start or now
    local s = t[i] - t[i] % w[i]
    if s ~= start then
      start, count, changed = s, 0, true
    end
    if kind == 'a' then
      count = math.min(math.max(0, count + amount), max_us)
      changed = true
      if count > burst[i] then
        allowed = false
      end
    elseif count + amount > burst[i] then
      allowed = false
    end
    st[2 * i - 1], st[2 * i] = start, count
  end
  if kind ~= 'a' and amount > 0 and (allowed or kind == 'd') then
    for i = 1, n do
      st[2 * i] = math.min(st[2 * i] + amount, max_us)
    end
    changed = true
  end
  o = o + 1
  out[o] = allowed and 1 or 0
  local idle = 0
  for i = 1, n do
    out[o + 1], out[o + 2], out[o + 3] = t[i], st[2 * i - 1], st[2 * i]
    o = o + 3
    if st[2 * i] > 0 and st[2 * i - 1] + w[i] > idle then
      idle = st[2 * i - 1] + w[i]
    end
  end
  if changed then
    if idle > 0 then
      local ms = math.ceil(math.max(0, idle - now) / 1000) + margin_ms
      local packed
      if n == 1 then
        packed = struct.pack(format, st[1], st[2])
      else
        packed = struct.pack(format, unpack(st, 1, 2 * n))
      end
      redis.call('SET', key, packed, 'PX', ms)
    elseif v then
      redis.call('DEL', key)
    end
  end
end
return out
