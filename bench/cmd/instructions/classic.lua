-- The textbook token bucket on Redis, as most tutorials and many services
-- write it: the state is a hash of two fields, the time comes from the
-- client, the expiry is whole seconds. It is the baseline sluice's script
-- is measured against.
--
-- KEYS[1] the bucket; ARGV: rate (tokens/s), burst, now (ms), cost.
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or burst
local ts = tonumber(state[2]) or now

local elapsed = math.max(0, now - ts)
tokens = math.min(burst, tokens + elapsed * rate / 1000)

local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end

redis.call('HMSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 1)
return allowed
