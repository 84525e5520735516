// Command rlsflood is the attacker of TestDomainFlood (internal/e2e): it
// floods one domain of Envoy's rate limit service at the address given,
// from conns connections of callers goroutines each, every goroutine with
// one call in flight at a time, until killed, and prints every 100ms the
// time of each call it made since, in nanoseconds, on one line.
// Each call has 64 descriptors (the most a call may have) of new values,
// so that each one costs the most to decode and to decide.
//
// The test builds it without the race detector, so that the attack costs
// what a real client's would, whatever the test binary is built with.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strconv"
	"strings"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "", "host:port of the rate limit service")
	domain := flag.String("domain", "flood", "the domain to flood")
	conns := flag.Int("conns", 20, "connections")
	callers := flag.Int("callers", 10, "goroutines per connection, one call in flight each")
	flag.Parse()
	var mu sync.Mutex
	var took []time.Duration
	for c := range *conns {
		conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			log.Fatal(err)
		}
		client := rlsv3.NewRateLimitServiceClient(conn)
		for g := range *callers {
			go func() {
				for i := (c**callers + g) << 20; ; i++ {
					req := &rlsv3.RateLimitRequest{Domain: *domain}
					for j := range 64 {
						req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
							Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: strconv.Itoa(i*64 + j)}},
						})
					}
					start := time.Now()
					_, _ = client.ShouldRateLimit(context.Background(), req)
					d := time.Since(start)
					mu.Lock()
					took = append(took, d)
					mu.Unlock()
				}
			}()
		}
	}
	for {
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		l := took
		took = nil
		mu.Unlock()
		if len(l) > 0 {
			line := make([]string, len(l))
			for i, d := range l {
				line[i] = strconv.FormatInt(int64(d), 10)
			}
			fmt.Println(strings.Join(line, " "))
		}
	}
}
