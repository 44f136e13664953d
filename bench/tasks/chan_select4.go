// chan_select4.go - Go side of the select benchmark
// (bench/tasks/chan_select4.c): a producer sends ints round-robin into 4
// buffered channels (capacity 256); a consumer takes them with a 4-way
// select.  ns_per_op is time per message.
//
// usage: chan_select4 [messages]
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
	var ch [4]chan int
	for k := range ch {
		ch[k] = make(chan int, 256)
	}
	var wg sync.WaitGroup
	var end time.Time
	wg.Add(2)
	start := time.Now()
	go func() {
		sum := 0
		for i := 0; i < n; i++ {
			var v int
			select {
			case v = <-ch[0]:
			case v = <-ch[1]:
			case v = <-ch[2]:
			case v = <-ch[3]:
			}
			sum += v
		}
		end = time.Now()
		if sum != n*(n-1)/2 {
			fmt.Fprintln(os.Stderr, "chan_select4: wrong sum")
		}
		wg.Done()
	}()
	go func() {
		for i := 0; i < n; i++ {
			ch[i&3] <- i
		}
		wg.Done()
	}()
	wg.Wait()
	return end.Sub(start)
}

func main() {
	n := 5000000
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	run(n / 20) // warm-up
	d := run(n)
	fmt.Printf("name=chan_select4 impl=go workers=%d ns_per_op=%.2f iters=%d\n",
		runtime.GOMAXPROCS(0), float64(d.Nanoseconds())/float64(n), n)
}
