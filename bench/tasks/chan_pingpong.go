// chan_pingpong.go - Go side of the unbuffered ping-pong benchmark
// (bench/tasks/chan_pingpong.c): two goroutines bounce an int over two
// unbuffered channels; ns_per_op is one round trip.
//
// usage: chan_pingpong [round_trips]
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"
)

func run(n int) time.Duration {
	ping, pong := make(chan int), make(chan int)
	var wg sync.WaitGroup
	var elapsed time.Duration
	wg.Add(2)
	go func() {
		for v := range ping {
			pong <- v + 1
		}
		wg.Done()
	}()
	go func() {
		v := 0
		t0 := time.Now()
		for i := 0; i < n; i++ {
			ping <- v
			v = <-pong
		}
		elapsed = time.Since(t0)
		if v != n {
			fmt.Fprintln(os.Stderr, "chan_pingpong: wrong count")
		}
		close(ping)
		wg.Done()
	}()
	wg.Wait()
	return elapsed
}

func main() {
	n := 2000000
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	run(n / 20) // warm-up
	d := run(n)
	fmt.Printf("name=chan_pingpong impl=go workers=%d ns_per_op=%.2f iters=%d\n",
		runtime.GOMAXPROCS(0), float64(d.Nanoseconds())/float64(n), n)
}
