-- sluice token bucket: a batch of checks and adjustments, each of every
-- rule of one key, atomic because Redis runs a script alone. A batch of one
-- is the common case; coalesced checks share one call (and one TIME).
-- It mirrors, line by line, the Go definition in bucket.go (refill, Decide,
-- AdjustBuckets, report, remaining, micros, ExpiryAfter); redisstore's
-- differential tests hold the two against each other: change both or
-- neither.
--
-- KEYS[j]  the key of check j: every rule's bucket of one caller, one string
-- ARGV[1]  the numbers below as little-endian float64s, packed: parsing
--          them with struct.unpack costs far less than a tonumber (strtod)
--          per number, and a float64 carries every value exactly (times in
--          µs and costs stay far below 2^53)
--   now     Unix microseconds, or -1 to use the Redis server's TIME
--   margin  expiry margin in milliseconds
--   then, for each check j in order:
--     op      0 to check, 1 to adjust
--     amount  cost (check) or delta (adjust), an integer
--     delay   max delay in microseconds (check; 0 = no reservation)
--     n       number of rules, then n pairs of rate (tokens/s) and burst
--
-- The value is n struct-packed doubles pairs (tokens, last): 16 bytes a
-- rule, exact (last < 2^53 µs) and cheaper to read than text. A missing or
-- differently sized value is a set of full buckets (FullBucket).
--
-- Returns, for each check, 7 numbers packed as little-endian float64s like
-- the arguments (one string converts far cheaper into a reply than an
-- array of integers): allowed 0|1, reported rule (0-based), limit,
-- remaining, retry after µs, reset after µs, delay µs.
--
-- Written for speed in Redis's interpreter: library functions in locals,
-- no closures, the numbers of ARGV[1] read a check at a time at a moving
-- position (struct.unpack returns the next one) rather than all into one
-- table, each check's reply packed on its own and joined once, and a check
-- of one rule unrolled (decideOne), with no tables at all.

local tolerance = 1e-9 -- as in bucket.go: absorbs float64 rounding
local max_us = 9007199254740992 -- 2^53 µs: MaxWait, where every wait saturates (micros)
local ceil, floor, min, huge = math.ceil, math.floor, math.min, math.huge
local pack, unpack_struct, rep, concat, call = struct.pack, struct.unpack, string.rep, table.concat, redis.call

local args = ARGV[1]
local now, margin_ms, a = unpack_struct('<dd', args) -- a: the next byte to read
if now < 0 then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
end

local out = {} -- out[j]: the 7 packed numbers of check j
local rb      -- rb[2i-1] rate, rb[2i] burst of rule i
local s       -- s[2i-1] tokens, s[2i] last of rule i
for j = 1, #KEYS do
  local key = KEYS[j]
  -- Every check has a rule, so 6 numbers are always there to read; rate
  -- and burst are rule 1's.
  local op, amount, max_delay, n, rate, burst, after = unpack_struct('<dddddd', args, a)
  if op == 0 and n == 1 then
    -- One check of one rule: decideOne, unrolled as in tokenbucket1.lua,
    -- for coalesced batches of the common case.
    a = after
    local tokens, last = burst, now
    local packed = call('GET', key)
    if packed and #packed == 16 then
      tokens, last = unpack_struct('<dd', packed)
    end
    local elapsed = now - last
    if elapsed < 0 then
      elapsed = 0
    end
    tokens = min(burst, tokens + elapsed / 1e6 * rate)
    if last < now then
      last = now
    end
    local wait = 0
    if tokens + tolerance < amount then
      wait = ceil((amount - tokens) / rate * 1e6)
      if wait > max_us then wait = max_us end -- saturates (micros)
    end
    local allowed = wait == 0 or (max_delay > 0 and wait <= max_delay)
    local retry, delay = 0, 0
    if not allowed then
      retry = wait
    else
      if wait > 0 then
        delay = wait
      end
      tokens = tokens - amount
    end
    local rem, reset = 0, 0
    if tokens > 0 then
      rem = floor(tokens + tolerance)
    end
    if burst - tokens > 0 then
      reset = ceil((burst - tokens) / rate * 1e6)
      if reset > max_us then reset = max_us end -- saturates (micros)
    end
    call('SET', key, pack('<dd', tokens, last), 'PX', ceil(reset / 1000) + margin_ms)
    out[j] = pack('<ddddddd', allowed and 1 or 0, 0, burst, rem, retry, reset, delay)
  else
    -- The rules' 2n numbers have the layout of the value: one format.
    local format = '<' .. rep('d', 2 * n)
    rb = { unpack_struct(format, args, a + 32) }
    a = rb[2 * n + 1]
    local packed = call('GET', key)
    if packed and #packed == 16 * n then
      s = { unpack_struct(format, packed) }
    else
      s = {}
      for i = 1, n do
        s[2 * i - 1], s[2 * i] = rb[2 * i], now -- FullBucket
      end
    end

    -- refill every rule: min(burst, tokens + max(0, now - last) * rate);
    -- last never moves backwards, so a clock behind never mints tokens.
    -- Check (Decide): wait is the µs until every bucket holds cost.
    -- Adjust (AdjustBuckets): take delta, capped at the burst.
    local cost, wait, allowed = 0, 0, true
    if op == 0 then
      cost = amount
    end
    for i = 1, n do
      local rate, burst = rb[2 * i - 1], rb[2 * i]
      local elapsed = now - s[2 * i]
      if elapsed < 0 then
        elapsed = 0
      end
      local tokens = min(burst, s[2 * i - 1] + elapsed / 1e6 * rate)
      if s[2 * i] < now then
        s[2 * i] = now
      end
      if op == 0 then
        if tokens + tolerance < cost then
          local w = ceil((cost - tokens) / rate * 1e6) -- micros
          if w > max_us then w = max_us end -- saturates (micros)
          if w > wait then
            wait = w
          end
        end
      else
        tokens = min(burst, tokens - amount)
        if tokens + tolerance < 0 then
          allowed = false
        end
      end
      s[2 * i - 1] = tokens
    end
    if op == 0 then
      allowed = wait == 0 or (max_delay > 0 and wait <= max_delay)
      if allowed then
        for i = 1, n do
          s[2 * i - 1] = s[2 * i - 1] - cost
        end
      end
    end

    -- report: denied, the rule that makes the caller wait longest; allowed,
    -- the one with the fewest whole tokens (remaining), ties to the one
    -- furthest from full. longest feeds ExpiryAfter.
    local best, best_rem, best_reset, retry, longest = 1, huge, -1, 0, 0
    for i = 1, n do
      local rate, tokens = rb[2 * i - 1], s[2 * i - 1]
      local reset = 0
      if rb[2 * i] - tokens > 0 then
        reset = ceil((rb[2 * i] - tokens) / rate * 1e6)
        if reset > max_us then reset = max_us end -- saturates (micros)
      end
      if reset > longest then
        longest = reset
      end
      if not allowed then
        if tokens + tolerance < cost then
          local w = ceil((cost - tokens) / rate * 1e6)
          if w > max_us then w = max_us end -- saturates (micros)
          if w > retry then
            best, retry = i, w
          end
        end
      else
        local rem = 0
        if tokens > 0 then
          rem = floor(tokens + tolerance)
        end
        if rem < best_rem or (rem == best_rem and reset > best_reset) then
          best, best_rem, best_reset = i, rem, reset
        end
      end
    end

    -- ExpiryAfter: keep the state until every bucket is full again, plus
    -- the margin; set on every path, denials included.
    call('SET', key, pack(format, unpack(s, 1, 2 * n)), 'PX', ceil(longest / 1000) + margin_ms)

    local tokens, burst, rate = s[2 * best - 1], rb[2 * best], rb[2 * best - 1]
    local rem, reset, delay = 0, 0, 0
    if tokens > 0 then
      rem = floor(tokens + tolerance)
    end
    if burst - tokens > 0 then
      reset = ceil((burst - tokens) / rate * 1e6)
      if reset > max_us then reset = max_us end -- saturates (micros)
    end
    if allowed and wait > 0 then
      delay = wait
    end
    out[j] = pack('<ddddddd', allowed and 1 or 0, best - 1, burst, rem, retry, reset, delay)
  end
end
return concat(out)
