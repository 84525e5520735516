-- sluice token bucket: a batch of checks and adjustments, each of every
-- rule of one key, atomic because Redis runs a script alone. Coalesced
-- checks share one call (and one TIME); a check or adjustment that is not
-- a lone check of one rule (tokenbucket1.lua) comes here as a batch of one.
-- It mirrors, line by line, the Go definition of how a check or an
-- adjustment changes the buckets (refill, Decide, AdjustBuckets, micros,
-- ExpiryAfter in bucket.go); redisstore's differential tests hold the two
-- against each other: change both or neither.
--
-- The checks of one key are decided together. The client sends them as
-- groups, a group being consecutive checks (or adjustments) of one key
-- with the same rules, in the order they arrived, and the groups of one
-- key one after the other. The script reads a key once, applies its
-- groups' checks one after the other to that state, and writes it once,
-- when the next key starts: the state passes from check to check as a GET
-- would have returned it after the SET before, so each check is decided
-- exactly as a call of its own at the same instant would decide it, and a
-- hot key costs Redis one GET and one SET a batch, whatever the number of
-- its checks. The script does not answer each check: it returns, for each
-- group, the buckets as it read them, and the client derives the group's
-- answers from them with sluice.Decide and sluice.AdjustBuckets, one check
-- after the other, as this script did. The differential tests hold the
-- answers, and so the state each batch leaves for the next, against
-- sequential calls.
--
-- KEYS[g]  the key of group g: every rule's bucket of one caller, one
--          string; consecutive groups may name the same key
-- ARGV[1]  the numbers below as little-endian float64s, packed: parsing
--          them with struct.unpack costs far less than a tonumber (strtod)
--          per number, and a float64 carries every value exactly (times in
--          µs and costs stay far below 2^53)
--   now     Unix microseconds, or -1 to use the Redis server's TIME
--   margin  expiry margin in milliseconds
--   then, for each group g in order:
--     op      0 to check, 1 to adjust; 2 more when a rule is a calendar
--             quota (Rule.Period)
--     n       number of rules
--     m       number of checks in the group, at least 1
--     n pairs of rate (tokens/s) and burst
--     with op 2 or 3, n triples of Unix µs: for a quota, the start and end
--       of the period that holds the client's time and the end of the
--       next, which Go computed in the quota's time zone (Lua knows none);
--       zeros for a token bucket
--     m pairs of amount, cost (check) or delta (adjust), an integer, and
--       delay, the max delay in microseconds (check; 0 = no reservation)
--
-- A quota's bucket is (tokens left, end of their period): once that end
-- has passed, the quota is whole again until the end of the period that
-- holds now (renew in calendar.go), the first of the three boundaries
-- after now.
-- The value is n struct-packed doubles pairs (tokens, last): 16 bytes a
-- rule, exact (last < 2^53 µs) and cheaper to read than text. A missing or
-- differently sized value is a set of full buckets (FullBucket).
--
-- Returns little-endian float64s packed like the arguments (one string
-- converts far cheaper into a reply than an array of numbers): now, then
-- for each group the value its key held before the group, as its n rules'
-- buckets (a set of full buckets as of now when it held none that fit).
--
-- Written for speed in Redis's interpreter: library functions in locals,
-- no closures, the numbers of ARGV[1] read a few at a time at a moving
-- position (struct.unpack returns the next one) rather than all into one
-- table, and checks of one rule unrolled (decideOne), with no tables.

local tolerance = 1e-9 -- as in bucket.go: absorbs float64 rounding
local max_us = 9007199254740992 -- 2^53 µs: MaxWait, where every wait saturates (micros)
local ceil, min = math.ceil, math.min
local pack, unpack_struct, rep, concat, call = struct.pack, struct.unpack, string.rep, table.concat, redis.call

local args = ARGV[1]
local now, margin_ms, a = unpack_struct('<dd', args) -- a: the next byte to read
if now < 0 then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
end

local out, o = { pack('<d', now) }, 1 -- out[o]: the o-th part of the reply
local key           -- the key of the group before, not yet written
local cur           -- its value, as a GET would return it now (false: none)
local px            -- the expiry of its last write, ms
local rb            -- rb[2i-1] rate, rb[2i] burst of rule i
local cb            -- cb[3i-2], cb[3i-1], cb[3i] the boundaries of rule i, or nil
local s             -- s[2i-1] tokens, s[2i] last of rule i
for g = 1, #KEYS do
  local k = KEYS[g]
  if k ~= key then
    if key then
      call('SET', key, cur, 'PX', px)
    end
    key, cur = k, call('GET', k)
  end
  -- Every group has a rule, so 5 numbers are always there to read; rate
  -- and burst are rule 1's.
  local op, n, m, rate, burst, after = unpack_struct('<ddddd', args, a)
  o = o + 1
  if op == 0 and n == 1 then
    -- Checks of one rule: decideOne, unrolled as in tokenbucket1.lua.
    a = after
    local tokens, last = burst, now
    if cur and #cur == 16 then
      tokens, last = unpack_struct('<dd', cur)
      out[o] = cur
    else
      out[o] = pack('<dd', tokens, last)
    end
    -- refill: min(burst, tokens + max(0, now - last) * rate); last never
    -- moves backwards, so a clock behind never mints tokens. Once a group:
    -- after its first check last >= now, so the refill of the next adds
    -- nothing, and tokens <= burst already.
    local elapsed = now - last
    if elapsed < 0 then
      elapsed = 0
    end
    tokens = min(burst, tokens + elapsed / 1e6 * rate)
    if last < now then
      last = now
    end
    for _ = 1, m do
      local cost, max_delay
      cost, max_delay, a = unpack_struct('<dd', args, a)
      -- allowed: no wait, or a reservation whose wait (micros) is within
      -- max_delay; a denial takes nothing
      if tokens + tolerance >= cost or (max_delay > 0 and ceil((cost - tokens) / rate * 1e6) <= max_delay) then
        tokens = tokens - cost
      end
    end
    -- ExpiryAfter of the last check: until the bucket is full again, plus
    -- the margin; on every path, denials included.
    local reset = 0
    if burst - tokens > 0 then
      reset = ceil((burst - tokens) / rate * 1e6)
      if reset > max_us then reset = max_us end -- saturates (micros)
    end
    px = ceil(reset / 1000) + margin_ms
    cur = pack('<dd', tokens, last)
  else
    -- The rules' 2n numbers have the layout of the value: one format.
    local format = '<' .. rep('d', 2 * n)
    rb = { unpack_struct(format, args, a + 24) }
    a = rb[2 * n + 1]
    cb = nil
    if op >= 2 then
      op = op - 2
      cb = { unpack_struct('<' .. rep('d', 3 * n), args, a) }
      a = cb[3 * n + 1]
    end
    if cur and #cur == 16 * n then
      s = { unpack_struct(format, cur) }
      out[o] = cur
    else
      s = {}
      for i = 1, n do
        s[2 * i - 1], s[2 * i] = rb[2 * i], now -- FullBucket
      end
      out[o] = pack(format, unpack(s, 1, 2 * n))
    end
    for _ = 1, m do
      local amount, max_delay
      amount, max_delay, a = unpack_struct('<dd', args, a)
      -- refill every rule: min(burst, tokens + max(0, now - last) * rate);
      -- last never moves backwards, so a clock behind never mints tokens.
      -- Check (Decide): wait is the µs until every bucket holds cost; all
      -- or nothing. Adjust (AdjustBuckets): take delta, capped at the
      -- burst.
      local wait, short = 0, false -- short: a quota holds less than cost, no reservation
      for i = 1, n do
        local rate, burst = rb[2 * i - 1], rb[2 * i]
        local tokens
        if cb and cb[3 * i] > 0 then
          -- A calendar quota (renew): whole again once its period ended.
          tokens = s[2 * i - 1]
          if s[2 * i] <= now then
            tokens = burst
            if now < cb[3 * i - 2] then
              s[2 * i] = cb[3 * i - 2]
            elseif now < cb[3 * i - 1] then
              s[2 * i] = cb[3 * i - 1]
            else
              s[2 * i] = cb[3 * i]
            end
          end
          if op == 0 then
            if tokens + tolerance < amount then
              short = true
              if s[2 * i] - now > wait then
                wait = s[2 * i] - now
              end
            end
          else
            tokens = min(burst, tokens - amount)
          end
        else
          local elapsed = now - s[2 * i]
          if elapsed < 0 then
            elapsed = 0
          end
          tokens = min(burst, s[2 * i - 1] + elapsed / 1e6 * rate)
          if s[2 * i] < now then
            s[2 * i] = now
          end
          if op == 0 then
            if tokens + tolerance < amount then
              local w = ceil((amount - tokens) / rate * 1e6) -- micros
              if w > wait then
                wait = w
              end
            end
          else
            tokens = min(burst, tokens - amount)
          end
        end
        s[2 * i - 1] = tokens
      end
      if op == 0 and (wait == 0 or (max_delay > 0 and not short and wait <= max_delay)) then
        for i = 1, n do
          s[2 * i - 1] = s[2 * i - 1] - amount
        end
      end
    end
    -- ExpiryAfter of the last check: keep the state until every bucket is
    -- full again (a quota drawn on: until its period ends), plus the
    -- margin; set on every path, denials included.
    local longest = 0
    for i = 1, n do
      local left = rb[2 * i] - s[2 * i - 1]
      if left > 0 then
        local reset
        if cb and cb[3 * i] > 0 then
          reset = s[2 * i] - now
        else
          reset = ceil(left / rb[2 * i - 1] * 1e6)
          if reset > max_us then reset = max_us end -- saturates (micros)
        end
        if reset > longest then
          longest = reset
        end
      end
    end
    px = ceil(longest / 1000) + margin_ms
    cur = pack(format, unpack(s, 1, 2 * n))
  end
end
if key then
  call('SET', key, cur, 'PX', px)
end
return concat(out)
