package config

import (
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/httpopts"
)

// LimiterOptions is c's HTTPSpec as the gateway builds its limiter from
// it, for the tests that look at the options: package config itself no
// longer links httplimit.
func (c *Config) LimiterOptions() (httplimit.Options, error) {
	return httpopts.Options(c.HTTPSpec())
}
