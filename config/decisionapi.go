package config

import "strings"

// DecisionAPI places the decision API (POST /v1/check, and forward auth
// on /v1/authz). It has a listener of its own and is not served on the
// traffic listener unless OnTrafficListener says so: there, anyone who can
// reach the proxy could read and drain every caller's bucket.
type DecisionAPI struct {
	// Listen is the decision listener's HOST:PORT; default 127.0.0.1:8070.
	// "off" opens no decision listener.
	Listen string `yaml:"listen"`
	// TokenFile holds a bearer token every call must carry
	// (Authorization: Bearer TOKEN); surrounding white space is trimmed.
	// Relative to the configuration file. Empty: no token.
	TokenFile string `yaml:"token_file"`
	// OnTrafficListener also serves /v1/check and /v1/authz on the
	// traffic listener, where they hide the upstream's own. Default false.
	OnTrafficListener bool `yaml:"on_traffic_listener"`
	// TLS of the decision listener, in place of the top-level tls (tls.go).
	TLS *TLS `yaml:"tls"`

	token []byte // read from TokenFile by Load
}

// DecisionListenOff is the value of decision_api.listen that opens no
// decision listener.
const DecisionListenOff = "off"

// maxTokenBytes bounds a token file; a token is a line, not a document.
const maxTokenBytes = 4096

// Token returns the bearer token read from TokenFile, or nil when none is
// configured.
func (d *DecisionAPI) Token() []byte { return d.token }

// Enabled reports whether the decision API is served anywhere.
func (d *DecisionAPI) Enabled() bool {
	return d.Listen != DecisionListenOff || d.OnTrafficListener
}

func (d *DecisionAPI) defaults() {
	if d.Listen == "" {
		d.Listen = "127.0.0.1:8070"
	}
}

func (v *validator) decisionAPI() {
	d := &v.c.DecisionAPI
	if d.Listen != DecisionListenOff {
		v.hostPort("decision_api.listen", d.Listen)
		if (d.Listen == v.c.Listen || d.Listen == v.c.AdminListen) && !strings.HasSuffix(d.Listen, ":0") {
			v.fail("decision_api.listen", "%q is also the traffic or admin listener; want an address of its own (or on_traffic_listener: true to serve /v1/check beside the proxy)", d.Listen)
		}
	}
	if d.TokenFile == "" {
		if d.OnTrafficListener {
			v.warn("decision_api.on_traffic_listener", "true without decision_api.token_file: anyone who reaches the proxy can read and drain any caller's bucket through /v1/check; set a token_file")
		}
		return
	}
	d.token = v.token("decision_api.token_file", d.TokenFile)
}
