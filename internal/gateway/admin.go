package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/redisstore"
)

// The admin API, under /v1/admin/ on the admin listener, behind the bearer
// token of admin.token_file (docs/admin.md): identities' runtime overrides
// (set, read, list, delete), the reset of an identity's buckets, and its
// usage, read without consuming. Without a token it is off, and says so;
// a request without the right token changes nothing and learns nothing.
// Every change is logged (who: the peer and X-Sluice-Actor; what; before
// and after) and counted in sluice_admin_changes_total.

// maxAdminBody bounds the body of a PUT: 16 rules for each of many
// policies need far less.
const maxAdminBody = 64 << 10

// maxActor bounds the X-Sluice-Actor header as it is logged.
const maxActor = 200

// adminMetrics counts the admin API's changes and the failed reads of
// shared overrides.
type adminMetrics struct {
	changes    *prometheus.CounterVec
	readErrors prometheus.Counter
}

// openOverrides builds the runtime overrides of cfg's store and reads them:
// in Redis with the Redis store, else in memory and admin.overrides_file.
// A file that cannot be read is an error; a Redis that does not answer is
// read again until it does. It must run after openStore.
func (g *Gateway) openOverrides(cfg *config.Config) error {
	g.adminMetrics = &adminMetrics{
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_admin_changes_total",
			Help: "Changes made through the admin API, by operation (set, delete, reset).",
		}, []string{"op"}),
		readErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_admin_override_read_errors_total",
			Help: "Failed reads of the runtime overrides shared in Redis (the last ones read stay in force).",
		}),
	}
	for _, op := range []string{"set", "delete", "reset"} {
		g.adminMetrics.changes.WithLabelValues(op)
	}
	g.reg.MustRegister(g.adminMetrics.changes, g.adminMetrics.readErrors)
	var backend overrideBackend = &memoryOverrides{path: cfg.Admin.OverridesPath(), log: g.log}
	if g.redisClient != nil {
		// A client of its own, whose calls may last adminCallTimeout:
		// the store's is cut at its deadline of milliseconds, and a
		// change it gave up on may happen after all.
		client, err := redisstore.NewClient(redisClientOptions(cfg.Store.Redis, adminCallTimeout, 4))
		if err != nil {
			return fmt.Errorf("%s: store.redis: %w", cfg.File, err)
		}
		backend = &redisOverrides{client: client}
	}
	g.overrides = &httplimit.Overrides{}
	g.overrideStore = &overrideSync{backend: backend, live: g.overrides, log: g.log, errors: g.adminMetrics.readErrors.Inc,
		zone: func() *time.Location {
			if st := g.state.Load(); st != nil {
				return st.cfg.QuotaZone()
			}
			return cfg.QuotaZone() // at start, before the first state
		}}
	if err := g.overrideStore.start(); err != nil {
		return fmt.Errorf("%s: %w", cfg.File, err)
	}
	closeStore := g.closeStore
	g.closeStore = func() error {
		g.overrideStore.close()
		return closeStore()
	}
	if !cfg.Admin.Enabled() {
		g.log.Info("sluice: the admin API is off (no admin.token_file)")
	}
	return nil
}

// adminAPI returns the handler of /v1/admin/.
func (g *Gateway) adminAPI() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/admin/overrides", g.listOverrides)
	mux.HandleFunc("GET /v1/admin/overrides/{identity}", g.getOverride)
	mux.HandleFunc("PUT /v1/admin/overrides/{identity}", g.putOverride)
	mux.HandleFunc("DELETE /v1/admin/overrides/{identity}", g.deleteOverride)
	mux.HandleFunc("POST /v1/admin/reset/{identity}", g.resetIdentity)
	mux.HandleFunc("GET /v1/admin/usage/{identity}", g.usage)
	mux.HandleFunc("/v1/admin/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "the admin API serves GET /v1/admin/overrides, GET|PUT|DELETE /v1/admin/overrides/{identity}, POST /v1/admin/reset/{identity} and GET /v1/admin/usage/{identity}")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := g.state.Load().cfg.Admin.Token()
		if token == nil {
			writeError(w, http.StatusNotFound, "admin_api_off", "the admin API is off: set admin.token_file in the configuration (see docs/admin.md)")
			return
		}
		if !bearerMatches(r.Header.Get("Authorization"), token) {
			g.rejected("admin", "unauthorized")
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-admin"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "the admin API needs Authorization: Bearer TOKEN (the token of admin.token_file)")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// identityOf reads the {identity} of the path, or answers 400.
func identityOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("identity")
	switch {
	case id == "":
		writeError(w, http.StatusBadRequest, "invalid_request", "the identity is missing from the path")
	case len(id) > maxCheckKey:
		writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("the identity is longer than %d bytes", maxCheckKey))
	case !utf8.ValidString(id):
		writeError(w, http.StatusBadRequest, "invalid_request", "the identity is not valid UTF-8; percent-encode its UTF-8 bytes")
	default:
		return id, true
	}
	return "", false
}

type overrideBody struct {
	Identity string          `json:"identity"`
	Policies policyOverrides `json:"policies"`
}

type changeBody struct {
	Identity string          `json:"identity"`
	Policies policyOverrides `json:"policies"`
	Before   policyOverrides `json:"before"`
}

func (g *Gateway) listOverrides(w http.ResponseWriter, r *http.Request) {
	table := g.overrideStore.all()
	out := make([]overrideBody, 0, len(table))
	for _, id := range slices.Sorted(maps.Keys(table)) {
		out = append(out, overrideBody{Identity: id, Policies: table[id]})
	}
	writeJSON(w, http.StatusOK, map[string]any{"overrides": out})
}

func (g *Gateway) getOverride(w http.ResponseWriter, r *http.Request) {
	id, ok := identityOf(w, r)
	if !ok {
		return
	}
	o := g.overrideStore.get(id)
	if o == nil {
		writeError(w, http.StatusNotFound, "no_override", fmt.Sprintf("%q has no runtime override; its limits are the configuration's", id))
		return
	}
	writeJSON(w, http.StatusOK, overrideBody{Identity: id, Policies: o})
}

func (g *Gateway) putOverride(w http.ResponseWriter, r *http.Request) {
	id, ok := identityOf(w, r)
	if !ok {
		return
	}
	if !isJSON(r.Header.Get("Content-Type")) {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "send Content-Type: application/json")
		return
	}
	body, status, err := readBody(w, r, maxAdminBody)
	if err != nil {
		writeError(w, status, errorCode(status), err.Error())
		return
	}
	o, err := parseOverride(body)
	if err == nil {
		err = g.validateOverride(o)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	before, err := g.overrideStore.set(r.Context(), id, o, g.lateChange(r, "set", id, o))
	if err != nil {
		g.changeFailed(w, "set", id, err)
		return
	}
	g.logChange(r, "set", id, before, o)
	writeJSON(w, http.StatusOK, changeBody{Identity: id, Policies: o, Before: before})
}

func (g *Gateway) deleteOverride(w http.ResponseWriter, r *http.Request) {
	id, ok := identityOf(w, r)
	if !ok {
		return
	}
	if g.overrideStore.get(id) == nil {
		writeError(w, http.StatusNotFound, "no_override", fmt.Sprintf("%q has no runtime override to delete", id))
		return
	}
	before, err := g.overrideStore.set(r.Context(), id, nil, g.lateChange(r, "delete", id, nil))
	if err != nil {
		g.changeFailed(w, "delete", id, err)
		return
	}
	g.logChange(r, "delete", id, before, nil)
	writeJSON(w, http.StatusOK, changeBody{Identity: id, Before: before})
}

// policiesOf returns the policies a reset or usage request names (?policy=
// once or more), or all of them.
func policiesOf(w http.ResponseWriter, r *http.Request, lim *httplimit.Limiter) ([]string, bool) {
	all := lim.Policies()
	names := r.URL.Query()["policy"]
	if len(names) == 0 {
		return all, true
	}
	for _, n := range names {
		if !slices.Contains(all, n) {
			writeError(w, http.StatusBadRequest, "unknown_policy", fmt.Sprintf("no policy is named %q; configured: %v", n, all))
			return nil, false
		}
	}
	return names, true
}

func (g *Gateway) resetIdentity(w http.ResponseWriter, r *http.Request) {
	id, ok := identityOf(w, r)
	if !ok {
		return
	}
	lim := g.state.Load().limiter
	names, ok := policiesOf(w, r, lim)
	if !ok {
		return
	}
	// A refill that failed may yet land (Redis runs a script it got late,
	// after the call gave up): its outcome is unknown. Refilling is
	// idempotent, so a failed one is tried again, until one is known to
	// have been taken; only then is the answer 200.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), adminDecideWithin)
	defer cancel()
	for _, p := range names {
		for {
			err := lim.Reset(ctx, p, id)
			if err == nil {
				break
			}
			if ctx.Err() == nil && !errors.Is(err, sluice.ErrInvalid) && !errors.Is(err, httplimit.ErrUnknownPolicy) {
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
					continue
				}
			}
			g.log.Error("sluice: admin reset of unknown outcome: the buckets may have been refilled, in part or whole", "op", "reset", "identity", id, "policy", p, "err", err)
			writeError(w, http.StatusServiceUnavailable, "outcome_unknown", fmt.Sprintf("policy %q: the store did not take the reset within %v, and a refill it got late may yet land: the buckets may have been refilled, in part or whole (a reset may be repeated safely): %v", p, adminDecideWithin, err))
			return
		}
	}
	g.logChange(r, "reset", id, nil, names)
	writeJSON(w, http.StatusOK, map[string]any{"identity": id, "reset": names})
}

// ruleUsage is one rule's standing, as the usage endpoint and /v1/check
// with cost 0 report it.
type ruleUsage struct {
	Rate         string `json:"rate,omitempty"`
	Burst        int64  `json:"burst,omitempty"`
	Quota        string `json:"quota,omitempty"` // a calendar quota, such as 100000/month
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	RetryAfterMs int64  `json:"retry_after_ms"`
}

type policyUsage struct {
	Source string      `json:"source,omitempty"`
	Rules  []ruleUsage `json:"rules,omitempty"`
	Error  string      `json:"error,omitempty"`
}

func rulesUsage(u httplimit.Usage) []ruleUsage {
	out := make([]ruleUsage, len(u.Results))
	for i, res := range u.Results {
		r := u.Rules[i]
		out[i] = ruleUsage{Rate: sluice.FormatRate(r.Rate), Burst: r.Burst, Remaining: res.Remaining,
			ResetAfterMs: ceilMs(res.ResetAfter), RetryAfterMs: ceilMs(res.RetryAfter)}
		if r.Period != sluice.Rolling {
			out[i].Rate, out[i].Burst = "", 0
			out[i].Quota = strconv.FormatInt(r.Burst, 10) + "/" + r.Period.String()
		}
	}
	return out
}

func (g *Gateway) usage(w http.ResponseWriter, r *http.Request) {
	id, ok := identityOf(w, r)
	if !ok {
		return
	}
	lim := g.state.Load().limiter
	names, ok := policiesOf(w, r, lim)
	if !ok {
		return
	}
	out := make(map[string]policyUsage, len(names))
	for _, p := range names {
		u, err := lim.Usage(r.Context(), p, httplimit.Caller{ID: id, Plan: r.URL.Query().Get("plan")})
		pu := policyUsage{Source: u.Source}
		switch {
		case errors.Is(err, sluice.ErrNotInspectable):
			pu.Error = "this policy's algorithm cannot report usage without consuming"
		case err != nil:
			pu.Error = "the store cannot answer: " + err.Error()
		default:
			pu.Rules = rulesUsage(u)
		}
		out[p] = pu
	}
	writeJSON(w, http.StatusOK, map[string]any{"identity": id, "policies": out})
}

// validateOverride checks o against the running policies.
func (g *Gateway) validateOverride(o policyOverrides) error {
	st := g.state.Load()
	lim := st.limiter
	for _, p := range slices.Sorted(maps.Keys(o)) {
		rules, err := parseRules(o[p], st.cfg.QuotaZone())
		if err != nil {
			return fmt.Errorf("policies.%s: %w", p, err)
		}
		if err := lim.ValidateRules(p, rules); err != nil {
			if errors.Is(err, httplimit.ErrUnknownPolicy) {
				return fmt.Errorf("policies.%s: no policy is named %q; configured: %v", p, p, lim.Policies())
			}
			return fmt.Errorf("policies.%s: %w", p, err)
		}
	}
	return nil
}

// logChange logs and counts one change: who (the peer, and the
// X-Sluice-Actor header the caller may add), what, before and after.
func (g *Gateway) logChange(r *http.Request, op, id string, before, after any) {
	g.audit("sluice: admin change", op, id, r.RemoteAddr, actorOf(r), before, after)
}

func (g *Gateway) audit(msg, op, id, peer, actor string, before, after any) {
	g.adminMetrics.changes.WithLabelValues(op).Inc()
	g.log.Info(msg, "op", op, "identity", id, "peer", peer, "actor", actor,
		"before", jsonText(before), "after", jsonText(after))
}

// actorOf is the X-Sluice-Actor header, valid UTF-8 and bounded.
func actorOf(r *http.Request) string {
	actor := strings.ToValidUTF8(r.Header.Get("X-Sluice-Actor"), "?")
	if len(actor) > maxActor {
		actor = strings.ToValidUTF8(actor[:maxActor], "") + "…"
	}
	return actor
}

// lateChange is told what became of a change whose answer was that Redis
// did not say whether it happened: one that happened is logged and
// counted as every change is, one that did not is logged.
func (g *Gateway) lateChange(r *http.Request, op, id string, after policyOverrides) lateOutcome {
	peer, actor := r.RemoteAddr, actorOf(r)
	return func(applied bool, before policyOverrides) {
		if applied {
			g.audit("sluice: admin change (it happened after its answer said its outcome was unknown)", op, id, peer, actor, before, after)
			return
		}
		g.log.Info("sluice: admin change did not happen (its answer said its outcome was unknown; it is fenced off and never will)", "op", op, "identity", id, "peer", peer, "actor", actor)
	}
}

// changeFailed answers a change of the overrides that failed: 503
// store_unavailable when it did not happen (and never will), 503
// outcome_unknown when Redis gave no answer to say.
func (g *Gateway) changeFailed(w http.ResponseWriter, op, id string, err error) {
	if errors.Is(err, errOutcomeUnknown) {
		g.log.Error("sluice: admin change of unknown outcome; the gateway resolves it when Redis answers, and logs what became of it", "op", op, "identity", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "outcome_unknown", fmt.Sprintf("Redis did not say within %v whether the change happened: it may have or not. The gateway asks again until Redis answers, fences the change off if it has not happened, and logs what became of it; GET the override to see. (%v)", adminDecideWithin, err))
		return
	}
	g.log.Error("sluice: admin change failed; nothing changed", "op", op, "identity", id, "err", err)
	writeError(w, http.StatusServiceUnavailable, "store_unavailable", "the change was not made, and nothing changed: "+err.Error())
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// parseOverride reads a PUT body strictly: exactly
// {"policies": {"NAME": [{"rate": "100/s", "burst": 200}, …], …}}, every
// name spelt exactly and given once, at least one policy and 1 to
// sluice.MaxRules rules each, and nothing after the object.
func parseOverride(body []byte) (policyOverrides, error) {
	const want = `want {"policies": {"payments": [{"rate": "100/s", "burst": 200}]}}`
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var out policyOverrides
	err := strictObject(dec, func(name string) error {
		if name != "policies" {
			return fmt.Errorf("unknown field %q; %s", truncate(name), want)
		}
		out = policyOverrides{}
		return strictObject(dec, func(policy string) error {
			rules, err := parseRuleList(dec)
			if err != nil {
				return fmt.Errorf("policies.%s: %w", truncate(policy), err)
			}
			out[policy] = rules
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("the body holds more than one JSON value")
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no policies given; %s (DELETE removes an identity's override)", want)
	}
	return out, nil
}

func parseRuleList(dec *json.Decoder) ([]overrideRule, error) {
	if err := delim(dec, '['); err != nil {
		return nil, fmt.Errorf(`want a list of rules such as [{"rate": "100/s", "burst": 200}]`)
	}
	var rules []overrideRule
	for dec.More() {
		if len(rules) == sluice.MaxRules {
			return nil, fmt.Errorf("more than %d rules", sluice.MaxRules)
		}
		var r overrideRule
		var has [3]bool
		err := strictObject(dec, func(name string) error {
			tok, err := dec.Token()
			if err != nil {
				return syntaxError(err)
			}
			switch name {
			case "rate":
				s, ok := tok.(string)
				if !ok {
					return errors.New(`rate: want a string such as "100/s"`)
				}
				r.Rate, has[0] = s, true
			case "burst":
				n, ok := tok.(json.Number)
				b, err := strconv.ParseInt(n.String(), 10, 64)
				if !ok || err != nil || b < 1 {
					return errors.New("burst: want an integer of 1 or more")
				}
				r.Burst, has[1] = b, true
			case "quota":
				s, ok := tok.(string)
				if !ok || s == "" {
					return errors.New(`quota: want a string such as "100000/month"`)
				}
				r.Quota, has[2] = s, true
			default:
				return fmt.Errorf("unknown field %q; a rule has rate and burst, or quota", truncate(name))
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", len(rules), err)
		}
		switch {
		case has[2] && (has[0] || has[1]):
			return nil, fmt.Errorf(`rule %d: a quota takes no rate or burst; want {"quota": "100000/month"} alone`, len(rules))
		case !has[2] && (!has[0] || !has[1]):
			return nil, fmt.Errorf(`rule %d: want both rate and burst, such as {"rate": "100/s", "burst": 200}, or a quota such as {"quota": "100000/month"}`, len(rules))
		}
		rules = append(rules, r)
	}
	if _, err := dec.Token(); err != nil {
		return nil, syntaxError(err)
	}
	if len(rules) == 0 {
		return nil, errors.New("no rules; want 1 to 16 (DELETE removes an identity's override)")
	}
	return rules, nil
}

// strictObject reads one JSON object from dec, calling field for each
// name (which must read the value); a name given twice is an error.
func strictObject(dec *json.Decoder, field func(name string) error) error {
	if err := delim(dec, '{'); err != nil {
		return err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return syntaxError(err)
		}
		name, _ := tok.(string)
		if seen[name] {
			return fmt.Errorf("field %q is given twice; give it once", truncate(name))
		}
		seen[name] = true
		if err := field(name); err != nil {
			return err
		}
	}
	_, err := dec.Token()
	if err != nil {
		return syntaxError(err)
	}
	return nil
}

func delim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return syntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want a JSON %s here, found %v", map[json.Delim]string{'{': "object", '[': "list"}[want], tok)
	}
	return nil
}

// usageOf is the standing on every rule that /v1/check with cost 0 adds to
// its answer, or nil when the store cannot read it.
func usageOf(ctx context.Context, lim *httplimit.Limiter, policy, key string) []ruleUsage {
	u, err := lim.Usage(ctx, policy, httplimit.Caller{ID: key})
	if err != nil {
		return nil
	}
	return rulesUsage(u)
}
