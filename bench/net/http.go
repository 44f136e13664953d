// http.go - the Go peer of examples/http_hello.c for bench/net: net/http
// answering every request with "Hello, World!\n", default server settings.
//
//	http [port]    listens on 127.0.0.1:port (default 0: the kernel picks);
//	               prints "listening on 127.0.0.1:PORT"
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
)

func main() {
	port := "0"
	if len(os.Args) > 1 {
		port = os.Args[1]
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, "http:", err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	hello := func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "Hello, World!\n")
	}
	err = http.Serve(ln, http.HandlerFunc(hello))
	fmt.Fprintln(os.Stderr, "http:", err)
	os.Exit(1)
}
