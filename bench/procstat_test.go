package bench

import (
	"net"
	"os"
	"testing"
)

// TestProcessSyscallsCountsSocketWrites: the count of this process's
// reads and writes grows by at least the writes it makes on a socket, and
// a process that does not exist is an error.
func TestProcessSyscallsCountsSocketWrites(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			buf := make([]byte, 1)
			for {
				if _, err := c.Read(buf); err != nil {
					c.Close()
					return
				}
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before, err := ProcessSyscalls(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	const writes = 100
	for range writes {
		if _, err := c.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	after, err := ProcessSyscalls(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < writes {
		t.Fatalf("%d system calls counted over %d socket writes", after-before, writes)
	}
	if _, err := ProcessSyscalls(-1); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
