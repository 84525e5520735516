package gateway

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/config"
)

// ErrRefused is what a reload refused by refuseReload returns (wrapped).
var ErrRefused = errors.New("reload refused")

// refuseReload applies the rules that protect a reload, by SIGHUP or by
// the file watch alike: a valid file that reads as one cut short, or
// caught half written, must not replace the limits being enforced. It
// refuses an empty file, a file without a policies key while policies are
// running, and a file whose envoy_rls.config_dir has lost every descriptor
// file while domains are being served. An explicit "policies: []" passes
// (the caller warns).
func refuseReload(old, cfg *config.Config) error {
	if f := cfg.Incomplete(); f != nil && (cfg.Empty() || len(old.Policies) > 0) {
		return fmt.Errorf("%w: %v (the running configuration has %d policies)", ErrRefused, f, len(old.Policies))
	}
	if n := len(old.EnvoyRLS.Domains()); n > 0 && cfg.EnvoyRLS.Dir() != "" && len(cfg.EnvoyRLS.Domains()) == 0 {
		if cfg.EnvoyRLS.Upstream != nil { // sluice ratelimit: no sluice.yaml
			return fmt.Errorf("%w: %s: no descriptor file left (the running configuration serves %d domains, and keeps serving them; envoyproxy/ratelimit would serve none); add a descriptor file, or restart sluice ratelimit to serve none", ErrRefused, cfg.EnvoyRLS.Dir(), n)
		}
		return fmt.Errorf("%w: %s: envoy_rls.config_dir: no descriptor file (*.yaml, *.yml) left (the running configuration serves %d domains); add a descriptor file, or remove envoy_rls.config_dir to stop serving them", ErrRefused, cfg.EnvoyRLS.Dir(), n)
	}
	return nil
}
