// chan_buffered.go - Go side of the buffered-channel throughput benchmark
// (bench/tasks/chan_buffered.c): one goroutine sends ints into a channel of
// capacity 1024, another receives them; ns_per_op is time per message.
//
// usage: chan_buffered [messages]
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
	ch := make(chan int, 1024)
	var wg sync.WaitGroup
	var end time.Time
	wg.Add(2)
	start := time.Now()
	go func() {
		sum, cnt := 0, 0
		for v := range ch {
			sum += v
			cnt++
		}
		end = time.Now()
		if sum != cnt*(cnt-1)/2 {
			fmt.Fprintln(os.Stderr, "chan_buffered: wrong sum")
		}
		wg.Done()
	}()
	go func() {
		for i := 0; i < n; i++ {
			ch <- i
		}
		close(ch)
		wg.Done()
	}()
	wg.Wait()
	return end.Sub(start)
}

func main() {
	n := 20000000
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	run(n / 20) // warm-up
	d := run(n)
	fmt.Printf("name=chan_buffered impl=go workers=%d ns_per_op=%.2f iters=%d\n",
		runtime.GOMAXPROCS(0), float64(d.Nanoseconds())/float64(n), n)
}
