package redistest

import (
	"context"
	"testing"
)

// Managed Redis means TLS and ACL users on clusters and sentinel groups too:
// the nodes, replication links and sentinels share the certificates and
// credentials.
func TestClusterWithTLSAndACL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := StartCluster(t, 3, 1, WithTLS(), WithACLUser("app", "pw"))
	c := cl.Client(t)
	if err := c.Set(ctx, "{a}k", "v", 0).Err(); err != nil {
		t.Fatalf("SET over TLS as ACL user: %v", err)
	}
	if err := cl.MasterForKey("{a}k").Client(t).Do(ctx, "WAIT", 1, 2000).Err(); err != nil {
		t.Fatalf("replication over TLS with ACL: %v", err)
	}
}

func TestSentinelWithTLSAndACL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sg := StartSentinel(t, WithTLS(), WithACLUser("app", "pw"))
	if err := sg.Client(t).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through sentinels over TLS as ACL user: %v", err)
	}
}
