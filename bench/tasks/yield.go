// yield.go - Go side of the yield micro-benchmark (bench/tasks/yield.c):
// two goroutines call runtime.Gosched in a loop; ns_per_op is the elapsed
// time divided by the total number of Gosched calls.  Run with GOMAXPROCS=1
// for "two tasks on one worker".
//
// usage: yield [iters_per_goroutine]
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"
)

func run(iters int) time.Duration {
	var wg sync.WaitGroup
	wg.Add(2)
	start := time.Now()
	for g := 0; g < 2; g++ {
		go func() {
			for i := 0; i < iters; i++ {
				runtime.Gosched()
			}
			wg.Done()
		}()
	}
	wg.Wait()
	return time.Since(start)
}

func main() {
	iters := 5000000
	if len(os.Args) > 1 {
		iters, _ = strconv.Atoi(os.Args[1])
	}
	run(iters / 20) // warm-up
	d := run(iters)
	fmt.Printf("name=yield impl=go workers=%d ns_per_op=%.2f iters=%d\n",
		runtime.GOMAXPROCS(0), float64(d.Nanoseconds())/float64(2*iters), 2*iters)
}
