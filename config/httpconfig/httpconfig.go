// Package httpconfig builds the options of an httplimit.Limiter from a
// configuration file, as the gateway does. It is apart from package config
// so that what reads a file without serving HTTP (the Envoy rate limit
// service) links neither the net/http middleware nor a JWT library.
package httpconfig

import (
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/httpopts"
)

// LimiterOptions translates c into the options of an httplimit.Limiter:
// everything but the Store, Metrics, Logger and Fallback, which the caller
// supplies. c must come from config.Load or config.Parse. The error is
// the JWT key's, when the authenticator refuses it.
func LimiterOptions(c *config.Config) (httplimit.Options, error) {
	return httpopts.Options(c.HTTPSpec())
}
