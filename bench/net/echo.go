// echo.go - the Go peer of examples/echo_server.c for bench/net: a TCP echo
// server with the net package, one goroutine per connection, reading into a
// buffer of the same size as the C server's (16 KiB) and writing back what
// it read.
//
//	echo [port]    listens on 127.0.0.1:port (default 0: the kernel picks);
//	               prints "listening on 127.0.0.1:PORT"
package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

const bufSize = 16384

func serve(c net.Conn) {
	defer c.Close()
	buf := make([]byte, bufSize)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func main() {
	port := "0"
	if len(os.Args) > 1 {
		port = os.Args[1]
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			// Out of descriptors: back off as net/http does, then retry.
			var ne net.Error
			if errors.As(err, &ne) && ne.Temporary() {
				if backoff == 0 {
					backoff = 5 * time.Millisecond
				} else if backoff *= 2; backoff > time.Second {
					backoff = time.Second
				}
				fmt.Fprintf(os.Stderr, "echo: accept: %v; retrying in %v\n", err, backoff)
				time.Sleep(backoff)
				continue
			}
			fmt.Fprintln(os.Stderr, "echo: accept:", err)
			os.Exit(1)
		}
		backoff = 0
		go serve(c)
	}
}
