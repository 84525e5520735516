package config

// CoalesceOn reports whether checks to Redis are coalesced: the default,
// unless the configuration says `coalesce: false`.
func (r Redis) CoalesceOn() bool { return r.Coalesce == nil || *r.Coalesce }
