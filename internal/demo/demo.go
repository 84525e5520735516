// Package demo is the small upstream that `sluice demo` and
// `sluice demo-upstream` serve behind the gateway: a shop with products, a
// payments endpoint, an "AI" endpoint that bills per generated token, and a
// search endpoint that the demo configuration paces instead of rejecting.
package demo

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Config is the gateway configuration of `sluice demo`: small bursts, so
// that a loop of curl sees 200s turn into 429s within seconds.
//
//go:embed demo.yaml
var Config []byte

// Handler returns the demo upstream.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", index)
	mux.HandleFunc("GET /products/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		writeJSON(w, map[string]any{"id": id, "name": "Widget " + id, "price_cents": 1999, "served_at": time.Now().UTC().Format(time.RFC3339Nano)})
	})
	mux.HandleFunc("POST /payments/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"payment": r.PathValue("id"), "status": "accepted"})
	})
	mux.HandleFunc("POST /ai/complete", complete)
	mux.HandleFunc("GET /search", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"q": r.URL.Query().Get("q"), "results": []string{"widget", "gadget"}, "served_at": time.Now().UTC().Format(time.RFC3339Nano)})
	})
	return mux
}

// complete pretends to generate text: one "token" per word of the prompt
// times three, reported in X-Sluice-Cost for the gateway to charge.
func complete(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	words := len(strings.Fields(string(body)))
	tokens := max(1, 3*words)
	w.Header().Set("X-Sluice-Cost", strconv.Itoa(tokens))
	writeJSON(w, map[string]any{"completion": strings.Repeat("bla ", tokens), "tokens": tokens})
}

func index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, `sluice demo upstream
  GET  /products/{id}   limited per client IP
  POST /payments/{id}   limited much tighter
  POST /ai/complete     charged after the fact by the tokens it generates
  GET  /search?q=       paced: held instead of rejected
`)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
