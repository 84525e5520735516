package main

import "testing"

func TestParseLine(t *testing.T) {
	r, ok := parseLine("BenchmarkRedis/w=zipf1M/c=32/cost=10/lib=sluice+coalesce-2   \t   25213\t     26889 ns/op\t         4.459 checks/call\t       104.0 redis-B/key\t     737 B/op\t      11 allocs/op")
	if !ok {
		t.Fatal("not parsed")
	}
	if r.bench != "BenchmarkRedis" || r.workload != "zipf1M" || r.callers != 32 || r.cost != 10 || r.lib != "sluice+coalesce" || r.n != 25213 {
		t.Errorf("got %+v", r)
	}
	if r.metrics["ns/op"] != 26889 || r.metrics["allocs/op"] != 11 || r.metrics["checks/call"] != 4.459 {
		t.Errorf("metrics %v", r.metrics)
	}
	if _, ok := parseLine("PASS"); ok {
		t.Error("PASS parsed as a result")
	}
	r, ok = parseLine("BenchmarkHeapPerKey/lib=xrate-2 \t 1\t 1234 ns/op\t 250.5 heap-B/key")
	if !ok || r.lib != "xrate" || r.metrics["heap-B/key"] != 250.5 {
		t.Errorf("heap line: %+v %v", r, ok)
	}
}
