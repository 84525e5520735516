package main

import (
	"context"
	"log/slog"

	"github.com/sluicehq/sluice/internal/gateway"
)

// watchConfig starts the watch of the configuration files unless
// reload.watch is off; the function it returns stops the watch and waits
// for it to end.
func watchConfig(ctx context.Context, g *gateway.Gateway, log *slog.Logger) (stop func()) {
	if !g.Config().Reload.Watching() {
		log.Info("sluice: configuration watch off (reload.watch: false); SIGHUP reloads")
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.WatchConfig(ctx); err != nil {
			log.Error("sluice: cannot watch the configuration; SIGHUP still reloads", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
