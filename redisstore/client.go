package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClientOptions says how to reach Redis: a standalone server by URL, a
// Cluster by its seed nodes, or a master through Sentinel. Credentials and
// TLS come from the URL (redis://user:password@host:port/db, rediss:// for
// TLS) or from the fields, which win when set.
type ClientOptions struct {
	// URL of a standalone server, or the source of credentials, database
	// and TLS for ClusterAddrs and Sentinel setups.
	URL string

	// ClusterAddrs, when set, are seed nodes of a Redis Cluster.
	ClusterAddrs []string

	// SentinelMaster and SentinelAddrs, when set, find the master through
	// Sentinel. SentinelUsername/Password authenticate to the sentinels.
	SentinelMaster   string
	SentinelAddrs    []string
	SentinelUsername string
	SentinelPassword string

	// Username and Password of an ACL user (or Password alone for
	// requirepass).
	Username string
	Password string

	// TLS, when non-nil, is used as is. Otherwise CACertFile, CertFile and
	// KeyFile (any of them) turn TLS on with those files.
	TLS        *tls.Config
	CACertFile string
	CertFile   string
	KeyFile    string

	// Timeout bounds dialing, reads and writes; zero means 50ms.
	Timeout time.Duration

	// PoolSize per node; zero means go-redis's default (10 per CPU).
	PoolSize int

	// FailFast dials once per attempt and never retries a command, for a
	// caller that decides what a failure means (the resilient layer): five
	// dials 100ms apart keep a call to a dead Redis going for half a
	// second, and a script whose connection broke after it was sent may
	// have run, so a retry could charge its tokens twice.
	FailFast bool
}

// NewClient builds the go-redis client that opts describe. It does not
// connect; call Ping to find a wrong password or certificate at start.
func NewClient(opts ClientOptions) (redis.UniversalClient, error) {
	u := &redis.UniversalOptions{}
	unix := false
	if opts.URL != "" {
		parsed, err := redis.ParseURL(opts.URL)
		if err != nil {
			// The parser's message quotes the URL, password and all.
			msg := strings.ReplaceAll(err.Error(), opts.URL, RedactURL(opts.URL))
			return nil, fmt.Errorf("redisstore: redis url %s: %s (want redis://[user:password@]host:port[/db] or rediss://… for TLS)", RedactURL(opts.URL), msg)
		}
		u.Addrs = []string{parsed.Addr}
		u.Username, u.Password, u.DB, u.TLSConfig = parsed.Username, parsed.Password, parsed.DB, parsed.TLSConfig
		if parsed.Network == "unix" {
			unix = true // go-redis dials an Addr that starts with "/" as a unix socket
		}
	}
	if len(opts.ClusterAddrs) > 0 {
		u.Addrs = opts.ClusterAddrs
		u.IsClusterMode = true
		if u.DB != 0 {
			return nil, errors.New("redisstore: a Redis Cluster has only database 0; drop the /db from the url")
		}
	}
	if opts.SentinelMaster != "" || len(opts.SentinelAddrs) > 0 {
		if opts.SentinelMaster == "" || len(opts.SentinelAddrs) == 0 {
			return nil, errors.New("redisstore: sentinel needs both a master name and sentinel addresses")
		}
		if len(opts.ClusterAddrs) > 0 {
			return nil, errors.New("redisstore: choose Cluster or Sentinel, not both")
		}
		u.MasterName, u.Addrs = opts.SentinelMaster, opts.SentinelAddrs
		u.SentinelUsername, u.SentinelPassword = opts.SentinelUsername, opts.SentinelPassword
	}
	if len(u.Addrs) == 0 {
		return nil, errors.New("redisstore: no Redis address: set a url, cluster addresses or sentinel addresses")
	}
	if opts.Username != "" {
		u.Username = opts.Username
	}
	if opts.Password != "" {
		u.Password = opts.Password
	}
	if opts.TLS != nil {
		u.TLSConfig = opts.TLS
	} else if opts.CACertFile != "" || opts.CertFile != "" || opts.KeyFile != "" {
		cfg, err := tlsFromFiles(opts.CACertFile, opts.CertFile, opts.KeyFile)
		if err != nil {
			return nil, err
		}
		u.TLSConfig = cfg
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 50 * time.Millisecond
	}
	u.DialTimeout, u.ReadTimeout, u.WriteTimeout = timeout, timeout, timeout
	if unix && (len(opts.ClusterAddrs) > 0 || opts.SentinelMaster != "") {
		return nil, errors.New("redisstore: a unix socket url reaches one server; use redis:// with cluster or sentinel addresses")
	}
	if u.TLSConfig == nil {
		// go-redis's own dialer, whose connections skip the health
		// check's system call when they answered within the last few
		// milliseconds (healthcheck.go). A TLS connection is never peeked.
		u.Dialer = dialRecent(timeout)
	}
	u.PoolSize = opts.PoolSize
	if opts.FailFast {
		u.DialerRetries, u.MaxRetries = 1, -1
	}
	// A caller's deadline (the resilience layer's, say) bounds the call,
	// not only the read and write timeouts.
	u.ContextTimeoutEnabled = true
	if u.IsClusterMode && u.MasterName == "" {
		c := u.Cluster()
		// go-redis reloads the slot map every minute by default, and a
		// dead master's dial errors do not trigger a reload: after a
		// failover its slots would fail for up to a minute.
		c.ClusterStateReloadInterval = ClusterReloadInterval
		return redis.NewClusterClient(c), nil
	}
	if len(u.Addrs) > 1 && u.MasterName == "" {
		return nil, errors.New("redisstore: several addresses but no cluster or sentinel: use cluster addresses for a Redis Cluster")
	}
	return redis.NewUniversalClient(u), nil
}

// ClusterReloadInterval is how often a Cluster client from NewClient
// reloads the slot map, which bounds how long a failover goes unseen.
const ClusterReloadInterval = time.Second

func tlsFromFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("redisstore: tls ca file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redisstore: tls ca file %s: no PEM certificate in it", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("redisstore: a tls client certificate needs both cert file and key file")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("redisstore: tls client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// Errors of Ping that a configuration fix, not a retry, cures: a gateway
// stops at start on them, while an unreachable Redis is left to the
// failure policy.
var (
	ErrCredentials = errors.New("redisstore: Redis refused the credentials")
	ErrCertificate = errors.New("redisstore: TLS handshake with Redis failed")
)

// Ping checks that client reaches Redis and is let in, with an error that
// says which part failed: the credentials (wrapping ErrCredentials), TLS
// (wrapping ErrCertificate), or the address.
func Ping(ctx context.Context, client redis.UniversalClient) error {
	err := client.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	switch {
	case redis.HasErrorPrefix(err, "WRONGPASS"), redis.HasErrorPrefix(err, "NOAUTH"), redis.HasErrorPrefix(err, "NOPERM"):
		return fmt.Errorf("%w: %v (check the user and password in the url or options)", ErrCredentials, err)
	}
	var certErr *tls.CertificateVerificationError
	var recordErr tls.RecordHeaderError
	var alert tls.AlertError
	switch {
	case errors.As(err, &certErr):
		return fmt.Errorf("%w: %v (the server's certificate is not trusted: set the CA file)", ErrCertificate, err)
	case errors.As(err, &recordErr):
		return fmt.Errorf("%w: %v (the server does not speak TLS: use redis:// or its TLS port)", ErrCertificate, err)
	case errors.As(err, &alert):
		return fmt.Errorf("%w: %v (the server rejected the handshake: does it require a client certificate?)", ErrCertificate, err)
	}
	return fmt.Errorf("redisstore: cannot reach Redis: %w", err)
}
