// mutex_contended.go - Go side of the mutex benchmarks
// (bench/tasks/mutex_contended.c): mutex_contended (4 goroutines
// lock/increment/unlock) and mutex_handoff (2 goroutines that Gosched while
// holding the lock).
//
// usage: mutex_contended [pairs_per_goroutine]
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"
)

var mu sync.Mutex
var counter int

func run(yield bool, tasks, n int) time.Duration {
	counter = 0
	var wg sync.WaitGroup
	wg.Add(tasks)
	t0 := time.Now()
	for g := 0; g < tasks; g++ {
		go func() {
			for i := 0; i < n; i++ {
				mu.Lock()
				counter++
				if yield {
					runtime.Gosched()
				}
				mu.Unlock()
			}
			wg.Done()
		}()
	}
	wg.Wait()
	d := time.Since(t0)
	if counter != tasks*n {
		fmt.Fprintln(os.Stderr, "mutex_contended: wrong count")
	}
	return d
}

func main() {
	n := 2000000
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	w := runtime.GOMAXPROCS(0)
	run(false, 4, n/20)
	d := run(false, 4, n)
	fmt.Printf("name=mutex_contended impl=go workers=%d ns_per_op=%.2f iters=%d\n",
		w, float64(d.Nanoseconds())/float64(4*n), 4*n)
	h := n / 10
	run(true, 2, h/20)
	d = run(true, 2, h)
	fmt.Printf("name=mutex_handoff impl=go workers=%d ns_per_op=%.2f iters=%d\n",
		w, float64(d.Nanoseconds())/float64(2*h), 2*h)
}
