-- fixed window: the windows' state step of fixedwindow.go (roll, decide,
-- count) for a batch of checks and adjustments, one after the other in
-- the order given. It does only what needs Redis: the Go client computes
-- the windows beforehand and each Result afterwards, from the state this
-- returns (fixedWindowReport), so the report has one definition.
--
-- KEYS[k]  the key of op k's caller (a key may come more than once)
-- ARGV[1]  the numbers below as little-endian doubles, packed (reading
--          them with struct.unpack costs far less than a tonumber each):
--          now in Unix µs (negative: the Redis server's TIME), the expiry
--          margin in ms, then per op its kind (0 check, 1 check that
--          counts a denied cost too, 2 adjust), amount (cost or delta),
--          number of rules n, and n pairs of window W (µs) and burst
--
-- Returns a string of packed doubles: per op, allowed (0|1), then per rule
-- t (now, clamped to the stored window), start and count after the op.
--
-- The value is struct-packed little-endian doubles, (start, count) per
-- rule; one of another size is none. Times and counts are whole numbers
-- below 2^53 held in doubles, so the arithmetic is exact. State whose
-- counts are all zero is as good as none (its idle time has passed, as the
-- in-memory store drops it): it is deleted, never stored.

local pack, unpack_struct, call = struct.pack, struct.unpack, redis.call
local args = ARGV[1]
local now, margin_ms, a = unpack_struct('<dd', args) -- a: the next byte to read
if now < 0 then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
end
local max_us = 9007199254740992 -- 2^53: a count saturates there (addCount)

-- The tables are reused from op to op; a key of one rule, the common
-- case, is read and written without a table of its own. A key that comes
-- more than once (a hot key's checks, coalesced) is read once and written
-- once: its value between ops is kept in val (false: none), its expiry in
-- ttl, and written at the end when an op changed it, as the last of
-- separate calls would have left it.
local w, burst, t, st, out = {}, {}, {}, {}, {}
local val, ttl, dirty, order = {}, {}, {}, {}
for k = 1, #KEYS do
  local key = KEYS[k]
  local kind, amount, n
  kind, amount, n, a = unpack_struct('<ddd', args, a)
  for i = 1, n do
    w[i], burst[i], a = unpack_struct('<dd', args, a)
    st[2 * i - 1], st[2 * i] = 0, 0 -- start and count: none
  end
  local format = n == 1 and '<dd' or '<' .. string.rep('d', 2 * n)
  local v = val[key]
  if v == nil then
    v = call('GET', key)
    val[key] = v
  end
  if v and #v == 16 * n then
    if n == 1 then
      st[1], st[2] = unpack_struct(format, v)
    else
      local u = { unpack_struct(format, v) }
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
    if kind == 2 then -- adjustFixedWindow
      count = math.min(math.max(0, count + amount), max_us)
      changed = true
      if count > burst[i] then
        allowed = false
      end
    elseif count + amount > burst[i] then -- decideFixedWindow
      allowed = false
    end
    st[2 * i - 1], st[2 * i] = start, count
  end
  if kind ~= 2 and amount > 0 and (allowed or kind == 1) then
    for i = 1, n do
      st[2 * i] = math.min(st[2 * i] + amount, max_us)
    end
    changed = true
  end
  local idle = 0
  for i = 1, n do
    if st[2 * i] > 0 and st[2 * i - 1] + w[i] > idle then
      idle = st[2 * i - 1] + w[i]
    end
  end
  local ok = allowed and 1 or 0
  if n == 1 then
    out[k] = pack('<dddd', ok, t[1], st[1], st[2])
  else
    local r = { pack('<d', ok) }
    for i = 1, n do
      r[i + 1] = pack('<ddd', t[i], st[2 * i - 1], st[2 * i])
    end
    out[k] = table.concat(r)
  end
  if changed and (idle > 0 or v) then
    if idle > 0 then
      if n == 1 then
        val[key] = pack(format, st[1], st[2])
      else
        val[key] = pack(format, unpack(st, 1, 2 * n))
      end
      ttl[key] = math.ceil(math.max(0, idle - now) / 1000) + margin_ms
    else
      val[key] = false
    end
    if not dirty[key] then
      dirty[key] = true
      order[#order + 1] = key
    end
  end
end
for _, key in ipairs(order) do
  local v = val[key]
  if v then
    call('SET', key, v, 'PX', ttl[key])
  else
    call('DEL', key)
  end
end
return table.concat(out)
