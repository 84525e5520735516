package gateway

import (
	"net/http/httputil"
	"net/netip"
	"strings"

	"github.com/sluicehq/sluice/httplimit"
)

// forwardingHeaders are the request headers in which a client or a proxy
// may claim who the client is or how it connected. Whatever a client wrote
// in them is removed before the upstream sees the request; only
// the chain of the header that trusted proxies write passes on, with this
// hop added.
var forwardingHeaders = []string{
	"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
	"X-Forwarded-Port", "X-Forwarded-Server", "X-Forwarded-Prefix", "X-Forwarded-Ssl",
	"X-Forwarded-Scheme", "X-Original-Forwarded-For", "X-Real-Ip", "X-Client-Ip",
	"X-Cluster-Client-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip",
	"X-Original-Host", "X-Original-Url", "X-Rewrite-Url", "X-Host", "X-Url-Scheme", "Front-End-Https",
}

// forward writes the forwarding headers of pr.Out in the header the
// configuration names: Forwarded (RFC 7239) with from == FromForwarded,
// else X-Forwarded-For with X-Forwarded-Host and -Proto. The chain a
// trusted peer sent in that header is kept and this hop appended; from any
// other peer the chain starts here.
func forward(pr *httputil.ProxyRequest, trusted []netip.Prefix, from httplimit.ForwardedFrom) {
	for _, h := range forwardingHeaders {
		pr.Out.Header.Del(h)
	}
	peer, err := netip.ParseAddrPort(pr.In.RemoteAddr)
	_, fromTrusted := trustedPeer(pr.In.RemoteAddr, trusted)
	if from != httplimit.FromForwarded {
		if fromTrusted {
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
		}
		pr.SetXForwarded()
		return
	}
	var b strings.Builder
	if fromTrusted {
		for _, v := range pr.In.Header["Forwarded"] {
			b.WriteString(v)
			b.WriteString(", ")
		}
	}
	b.WriteString("for=")
	switch a := peer.Addr().Unmap(); {
	case err != nil:
		b.WriteString("unknown")
	case a.Is6():
		b.WriteString(`"[` + a.WithZone("").String() + `]"`)
	default:
		b.WriteString(a.String())
	}
	b.WriteString(`;host="`)
	b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(pr.In.Host))
	b.WriteString(`";proto=`)
	if pr.In.TLS != nil {
		b.WriteString("https")
	} else {
		b.WriteString("http")
	}
	pr.Out.Header.Set("Forwarded", b.String())
}
