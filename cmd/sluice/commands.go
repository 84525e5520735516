package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/advise"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/config/httpconfig"
	"github.com/sluicehq/sluice/internal/demo"
	"github.com/sluicehq/sluice/internal/gateway"
	"github.com/sluicehq/sluice/simulate"
)

const usage = `sluice: rate limiting and throttling for HTTP services.

Usage:
  sluice <command> [flags]

Commands:
  serve --config FILE   run the gateway: a reverse proxy to the configured
                        upstream that enforces the policies, the decision
                        API POST /v1/check on a listener of its own, and an
                        admin listener with /metrics, /healthz and /readyz.
                        A change of the file applies on its own (it is
                        watched), and on SIGHUP; SIGTERM drains and shuts
                        down gracefully, SIGINT without the drain delay.
  ratelimit             a drop-in for envoyproxy/ratelimit: Envoy's rate limit
                        service configured by its environment variables alone
                        (REDIS_URL, RUNTIME_ROOT, GRPC_PORT, …; docs/envoy.md).
  check-config FILE     validate a configuration file; exit status 2 and
                        every problem (file:line: field: what is wrong) when
                        it is invalid.
  demo                  try sluice: start a demo upstream and the gateway in
                        front of it, with small limits, and print what to curl.
  demo-upstream         run the demo upstream alone.
  advise                derive limits from access logs.
  simulate              compare rate limiting algorithms on traffic scenarios.
  version               print the version and the VCS revision.
  help [COMMAND]        show this help, or a command's.

Run 'sluice <command> --help' for a command's flags.
`

// run is the whole program, for tests: it returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "help":
		if len(rest) == 0 {
			fmt.Fprint(stdout, usage)
			return 0
		}
		return run(append(slices.Clone(rest), "--help"), stdin, stdout, stderr) // help advise generate: generate's
	case "version", "-version", "--version":
		return version(rest, stdout, stderr)
	case "serve":
		return serve(rest, stdout, stderr)
	case "check-config":
		return checkConfig(rest, stdout, stderr)
	case "ratelimit":
		return ratelimit(rest, os.Environ(), stdout, stderr)
	case "demo":
		return runDemo(rest, stdout, stderr)
	case "demo-upstream":
		return demoUpstream(rest, stdout, stderr)
	case "advise":
		return advise.Command(rest, stdin, stdout, stderr)
	case "simulate":
		return simulate.Command(rest, stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", cmd, usage)
	return 2
}

// flagSet is a command's flags and its help text.
type flagSet struct {
	*flag.FlagSet
	doc    string
	stdout io.Writer
}

// newFlags returns the flag set of `sluice name`; doc is its help, which
// ends with a "Flags:" heading when the command has flags.
func newFlags(name, doc string, stdout, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // parse prints the help, or the mistake, once
	return &flagSet{FlagSet: fs, doc: doc, stdout: stdout}
}

// parse parses args and returns the exit status to stop with, or -1 to go
// on. -h and --help print the help on stdout and exit 0; a bad flag is
// named on stderr (by the flag package) with where to find the help, exit 2.
func (fs *flagSet) parse(args []string) int {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.printHelp(fs.stdout)
		return 0
	case err != nil:
		fmt.Fprintf(fs.Output(), "Run '%s --help' for usage.\n", fs.Name())
		return 2
	}
	return -1
}

func (fs *flagSet) printHelp(w io.Writer) {
	fmt.Fprint(w, fs.doc)
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

type logFlags struct {
	level, format *string
}

func addLogFlags(fs *flagSet) logFlags {
	return logFlags{
		level:  fs.String("log-level", "info", "log level: debug, info, warn or error"),
		format: fs.String("log-format", "text", "log format: text or json"),
	}
}

func (lf logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(*lf.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", *lf.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch *lf.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", *lf.format)
}

const serveDoc = `Usage: sluice serve --config FILE [flags]

Run the gateway described by FILE (see examples/sluice.yaml): a reverse
proxy to its upstream that enforces its policies and answers 429 with
RateLimit headers; the decision API POST /v1/check on its own listener
(decision_api.listen, 127.0.0.1:8070 by default; never the traffic
listener unless decision_api.on_traffic_listener says so); and /metrics,
/healthz and /readyz on the admin listener. With envoy_rls.listen it also
serves Envoy's rate limit service over gRPC from envoyproxy/ratelimit's
descriptor files (envoy_rls.config_dir; see docs/envoy.md). Without an
upstream only the decision API is served; without a store section the
buckets live in memory.

FILE and envoy_rls.config_dir are watched: a change (written in place,
renamed over, or a Kubernetes ConfigMap update) applies within about 2 s,
unless reload.watch is false. SIGHUP reopens the access log
(access_log.path, for logrotate), reads FILE again and switches to it.
Either way, an invalid file, an empty one, or one without a policies key
while policies are running is logged and the running configuration kept.
${VAR} and ${VAR:-default} in FILE's values are read from the
environment. SIGTERM drains: /readyz answers 503 at once, the listeners
serve for server.shutdown_delay (5s) so that load balancers stop sending,
then stop accepting, and requests in flight finish within
server.shutdown_timeout (15s). SIGINT skips the delay; a second signal
ends the process at once (status 130 or 143, 128 + the signal).

Exit status: 0 after a clean shutdown, 2 when FILE is invalid, 1 otherwise.

Flags:
`

func serve(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve", serveDoc, stdout, stderr)
	path := fs.String("config", "", "configuration file (required)")
	grace := fs.Duration("shutdown-grace", 0, "how long requests in flight may finish at shutdown, in place of server.shutdown_timeout (15s by default)")
	lf := addLogFlags(fs)
	if code := fs.parse(args); code >= 0 {
		return code
	}
	if fs.NArg() > 1 || (*path != "" && fs.NArg() > 0) {
		fmt.Fprintf(stderr, "sluice serve: one configuration FILE, by --config or as the argument; %q is one more\n", fs.Arg(fs.NArg()-1))
		return 2
	}
	if *path == "" && fs.NArg() == 1 {
		*path = fs.Arg(0)
	}
	if *path == "" {
		fmt.Fprintln(stderr, "sluice serve: --config FILE is required (try examples/sluice.yaml, or 'sluice demo')")
		return 2
	}
	log, err := lf.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sluice serve:", err)
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	for _, w := range cfg.Warnings {
		log.Warn("sluice: " + w)
	}
	g, err := gateway.New(cfg, *path, log)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	return runGateway("sluice serve", g, *grace, log, stderr)
}

// runGateway opens g's listeners and serves until a signal stops it:
// SIGHUP reloads, the configuration is watched unless reload.watch is
// off, SIGTERM drains. It returns the exit status.
func runGateway(name string, g *gateway.Gateway, grace time.Duration, log *slog.Logger, stderr io.Writer) int {
	if err := g.Listen(); err != nil {
		g.Close()
		fmt.Fprintln(stderr, name+":", err)
		return 1
	}
	ctx, stop := stopOnSignal(g)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = g.Reload() // logged; the running configuration stays
			}
		}
	}()
	defer watchConfig(ctx, g, log)()
	if err := g.Serve(ctx, grace); err != nil {
		log.Error("sluice: serve", "err", err)
		return 1
	}
	return 0
}

// stopOnSignal returns a context that ends when serve should stop
// accepting. SIGTERM, what an orchestrator sends, drains first: /readyz
// fails at once and the listeners serve for server.shutdown_delay, so that
// load balancers stop sending; SIGINT (Ctrl-C) skips the delay. A second
// signal ends the process at once, requests in flight or not, with status
// 128 + the signal's number, as a shell reports a process it killed. It
// is an exit of its own, not the signal's default action put back: a
// process started with SIGINT ignored (nohup, a script's `cmd &`) would
// get its ignoring back, and wait out shutdown_timeout.
func stopOnSignal(g *gateway.Gateway) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		select {
		case s := <-sig:
			go func() {
				s := <-sig
				n, _ := s.(syscall.Signal)
				fmt.Fprintf(os.Stderr, "sluice: %v again: exiting at once\n", s)
				os.Exit(128 + int(n))
			}()
			if s == syscall.SIGTERM {
				g.Drain(ctx)
			}
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, func() { signal.Stop(sig); cancel() }
}

const checkDoc = `Usage: sluice check-config FILE

Validate FILE as sluice serve would read it, key and secret files
and ${VAR} from the environment included; an empty file, or one without
a policies key, is an error (write policies: [] to limit nothing). Prints "FILE: ok" and exits 0 when it is valid, with a warning
on stderr for what is valid but probably not meant (such as no catch-all
policy in front of an upstream); otherwise prints every problem of the
file in one pass, one a line, as FILE:LINE: FIELD: what is wrong and what
would be valid, and exits 2.

Flags:
`

func checkConfig(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("check-config", checkDoc, stdout, stderr)
	path := fs.String("config", "", "configuration file (or give it as the argument)")
	if code := fs.parse(args); code >= 0 {
		return code
	}
	if *path == "" && fs.NArg() == 1 {
		*path = fs.Arg(0)
	} else if fs.NArg() > 0 { // a.yaml b.yaml, or --config a.yaml b.yaml: b.yaml went unchecked
		*path = ""
	}
	if *path == "" {
		fmt.Fprintln(stderr, "sluice check-config: want one FILE to check; run 'sluice check-config --help' for usage.")
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if _, err := httpconfig.LimiterOptions(cfg); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if f := cfg.Incomplete(); f != nil {
		fmt.Fprintln(stderr, f)
		return 2
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	fmt.Fprintf(stdout, "%s: ok (%d policies, store %s)\n", *path, len(cfg.Policies), cfg.Store.Type)
	return 0
}

const demoUpstreamDoc = `Usage: sluice demo-upstream [--listen ADDR]

Serve the demo upstream: GET /products/{id}, POST /payments/{id},
POST /ai/complete (reports its cost in X-Sluice-Cost) and GET /search.

Flags:
`

func demoUpstream(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo-upstream", demoUpstreamDoc, stdout, stderr)
	listen := fs.String("listen", "127.0.0.1:3000", "address to serve on")
	if code := fs.parse(args); code >= 0 {
		return code
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "sluice demo-upstream:", err)
		return 1
	}
	fmt.Fprintf(stdout, "demo upstream on http://%s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serveUntil(ctx, ln, demo.Handler()); err != nil {
		fmt.Fprintln(stderr, "sluice demo-upstream:", err)
		return 1
	}
	return 0
}

func serveUntil(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

const demoDoc = `Usage: sluice demo [flags]

Start the demo upstream and the gateway in front of it with a small
built-in configuration (products: burst 5, 1/s per client IP), and print
what to curl to watch 200s turn into 429s. Ctrl-C stops both.

Flags:
`

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", demoDoc, stdout, stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "gateway traffic address")
	admin := fs.String("admin-listen", "127.0.0.1:9090", "gateway admin address (/metrics)")
	decision := fs.String("decision-listen", "127.0.0.1:8070", "gateway decision API address (POST /v1/check)")
	upstream := fs.String("upstream-listen", "127.0.0.1:3000", "demo upstream address")
	lf := addLogFlags(fs)
	if code := fs.parse(args); code >= 0 {
		return code
	}
	log, err := lf.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 2
	}
	upLn, err := net.Listen("tcp", *upstream)
	if err != nil {
		fmt.Fprintln(stderr, "sluice demo: upstream:", err, "(pick another with --upstream-listen)")
		return 1
	}
	cfg, err := config.Parse("demo.yaml (built in)", ".", demo.Config)
	if err != nil {
		upLn.Close()
		fmt.Fprintln(stderr, err)
		return 1
	}
	cfg.Listen, cfg.AdminListen, cfg.Upstream = *listen, *admin, "http://"+upLn.Addr().String()
	cfg.DecisionAPI.Listen = *decision
	g, err := gateway.New(cfg, "", log)
	if err != nil {
		upLn.Close()
		fmt.Fprintln(stderr, err)
		return 1
	}
	if err := g.Listen(); err != nil {
		upLn.Close()
		g.Close()
		fmt.Fprintln(stderr, "sluice demo:", err, "(pick others with --listen, --admin-listen and --decision-listen)")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { _ = serveUntil(ctx, upLn, demo.Handler()) }()
	traffic, adminAddr := g.Addrs()
	decisionAddr := "off"
	if a := g.DecisionAddr(); a != nil {
		decisionAddr = a.String()
	}
	fmt.Fprint(stdout, demoBanner(traffic.String(), adminAddr.String(), decisionAddr, upLn.Addr().String()))
	if err := g.Serve(ctx, 5*time.Second); err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 1
	}
	return 0
}

func demoBanner(traffic, admin, decision, upstream string) string {
	r := strings.NewReplacer("GW", traffic, "ADMIN", admin, "DECIDE", decision, "UP", upstream)
	return r.Replace(`
sluice demo: gateway  http://GW  ->  demo upstream http://UP
             decision http://DECIDE/v1/check
             admin    http://ADMIN/metrics

Products allow a burst of 5, then 1 per second per client. Watch the 200s
turn into 429s:

  for i in $(seq 1 10); do curl -s -o /dev/null -w '%{http_code}\n' http://GW/products/42; done

See the headers of one response, and the body of a 429:

  curl -i http://GW/products/42

Payments are tighter (burst 2, 2 a minute); searches are paced, not rejected:

  for i in $(seq 1 3); do curl -s -o /dev/null -w '%{http_code}\n' -X POST http://GW/payments/7; done
  for i in $(seq 1 5); do curl -s -o /dev/null -w '%{http_code} after %{time_total}s\n' 'http://GW/search?q=x'; done

Ask the decision API on its own listener, as a service in any language would:

  curl -s -X POST http://DECIDE/v1/check -H 'Content-Type: application/json' -d '{"policy":"products","key":"user-1024","cost":1}'

Decisions in the metrics:

  curl -s http://ADMIN/metrics | grep sluice_decisions_total

Ctrl-C stops the demo.
`)
}
